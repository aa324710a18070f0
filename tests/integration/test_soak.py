#!/usr/bin/python3
"""The hardening drill (scripts/soak.py) in CI size, and proof that its judge can fail.

SoakTest runs scripts/soak.py against a real mnemo-server serving the bundled model: 64
concurrent streams for 45 s with client cancels, 2-300 ms deadlines, channels closed
mid-stream, a child process SIGKILLed mid-stream and a call reset before its request every ~4 s,
sessions and one-shot calls mixed. It passes only with the driver's verdict PASS (every status
code expected, OK streams well formed, the server idle after the load, no session left, exit 0
on SIGTERM, no error line in its log, RSS growth within bounds) and a record showing that the
drill really happened.

The full drill is scripts/soak.sh: 256 streams for 10 minutes, RSS growth under 5% from the end
of a 120 s warm-up (docs/results/hardening_soak.json). A 45 s run cannot use those numbers. The
server's RSS climbs for its first minute or more under this load (the allocator's arenas fill,
one-shot memories of ~9.4 MB each come and go with up to 64 running, sessions' kNN memories
fill), for longer the slower the machine, and 2 s samples swing by ~3%. Measured from 20 s to
45 s in seven runs on the shared 2-core development machine (compile jobs beside it): +3.0% to
+13.0%, the more the slower the machine, with no leaked allocation found (heaptrack) and no
leaked memory region (the server's mapping count stays flat). So here the warm-up is the first
20 s and the limit 25%: blind to a slow leak, which only the 10-minute run can see, but still a
failure for anything leaked per disrupted call (a run cuts ~100 calls short; leaking the 9.4 MB
one-shot memory of each would add ~900 MB, +80%). Leaked sessions fail the run on their own
(no session may be left at the end).

SoakJudgeTest feeds the driver's judge and log scanner known outcomes, and runs a few seconds of
the drill against a server that refuses what the drill sends (--max_new_tokens 4): the verdict
must be FAIL, naming INVALID_ARGUMENT.

Run by CTest with Debian's /usr/bin/python3 (MNEMO_SERVER from the environment or build/).
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.environ.get("MNEMO_SOURCE_DIR", os.path.dirname(os.path.dirname(_HERE)))
_BUILD = os.environ.get("MNEMO_BUILD_DIR", os.path.join(_ROOT, "build"))
SOAK = os.path.join(_ROOT, "scripts", "soak.py")
SERVER = os.environ.get("MNEMO_SERVER", os.path.join(_BUILD, "server", "mnemo-server"))
MODEL = os.path.join(_ROOT, "models", "mnemo-stdlib")
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(_ROOT, "scripts"))

import soak_load  # noqa: E402
import soak_server  # noqa: E402

STREAMS = 64
SECONDS = 45
WARMUP_S = 20
MAX_RSS_GROWTH_PCT = 25


def run_soak(workdir, *args, timeout=600):
    """Runs the driver against its own server; returns (exit code, output, the JSON record)."""
    record = os.path.join(workdir, "soak.json")
    proc = subprocess.run(
        ["/usr/bin/python3", SOAK, "--server", SERVER, "--model", MODEL, "--json", record,
         "--server-log", os.path.join(workdir, "server.log")] + list(args),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        timeout=timeout)
    output = proc.stdout.decode("utf-8", "replace")
    result = None
    if os.path.exists(record):
        with open(record) as f:
            result = json.load(f)
    return proc.returncode, output, result


class SoakTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(SERVER, os.X_OK):
            raise RuntimeError(f"missing binary {SERVER} (build with scripts/build.sh)")

    def test_short_soak_passes(self):
        with tempfile.TemporaryDirectory(prefix="mnemo-soak-") as workdir:
            rc, output, result = run_soak(
                workdir, "--streams", str(STREAMS), "--seconds", str(SECONDS),
                "--warmup", str(WARMUP_S), "--max-rss-growth", str(MAX_RSS_GROWTH_PCT),
                "--seed", "7")
            tail = "\n".join(output.splitlines()[-60:])
            self.assertIsNotNone(result, f"no JSON record:\n{tail}")
            self.assertEqual(result["verdict"], "PASS", tail)
            self.assertEqual(rc, 0, tail)
            # The drill happened: traffic, every kind of disruption, an RSS measurement.
            codes = result["code_totals"]
            self.assertGreater(result["calls_total"], 300, tail)
            self.assertGreater(result["tokens"], 2000, tail)
            self.assertGreater(codes.get("CANCELLED", 0), 10, tail)
            self.assertGreater(codes.get("DEADLINE_EXCEEDED", 0), 10, tail)
            self.assertGreater(result["calls_by_mode"]["disconnect"].get("CANCELLED", 0), 0, tail)
            self.assertGreaterEqual(result["child_kills"]["mid_stream"], 3, tail)
            self.assertIsNotNone(result["rss_growth_pct"], tail)
            self.assertEqual(result["unexpected"], [])
            print(f"\n[soak] {result['calls_total']} calls, {result['tokens']} tokens, codes "
                  f"{codes}, RSS {result['rss_warmup_kb'] // 1024} -> "
                  f"{result['rss_final_kb'] // 1024} MB ({result['rss_growth_pct']:+.1f}%)",
                  file=sys.stderr)


class SoakJudgeTest(unittest.TestCase):
    """The judge fails what it must: the drill is not a test that cannot fail."""

    def setUp(self):
        # The judge prints each unexpected outcome to stderr; here they are the point.
        quiet = contextlib.redirect_stderr(io.StringIO())
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)

    def test_codes_outside_the_expected_set_are_unexpected(self):
        ledger = soak_load.Ledger(limits=False, busy_grace=10.0)
        ledger.record("Score.oneshot", "normal", "OK", "", end_at=1.0)
        ledger.record("Generate.oneshot", "deadline", "DEADLINE_EXCEEDED", "", end_at=1.0)
        ledger.record("Generate.oneshot", "cancel", "CANCELLED", "", end_at=1.0)
        self.assertEqual(ledger.unexpected_total, 0)
        ledger.record("Generate.oneshot", "normal", "CANCELLED", "server cancelled", end_at=1.0)
        ledger.record("Score.oneshot", "normal", "INTERNAL", "boom", end_at=1.0)
        ledger.record("Tokenize", "normal", "RESOURCE_EXHAUSTED", "max_waiting", end_at=1.0)
        self.assertEqual(ledger.unexpected_total, 3)
        self.assertEqual([u["code"] for u in ledger.unexpected],
                         ["CANCELLED", "INTERNAL", "RESOURCE_EXHAUSTED"])
        limited = soak_load.Ledger(limits=True, busy_grace=10.0)
        limited.record("Tokenize", "normal", "RESOURCE_EXHAUSTED", "max_waiting", end_at=1.0)
        self.assertEqual(limited.unexpected_total, 0)

    def test_not_found_only_after_the_drivers_own_delete(self):
        ledger = soak_load.Ledger(limits=False, busy_grace=10.0)
        ledger.session("a").created = True
        ledger.record("GetSession", "normal", "NOT_FOUND", "gone", "a", 1.0, 2.0)
        self.assertEqual(ledger.unexpected_total, 1)  # nobody deleted it
        ledger.session("a").deletes.append([3.0, None])  # a delete sent at t=3, in flight
        ledger.record("Generate.session", "normal", "NOT_FOUND", "gone", "a", 2.5, 3.5)
        self.assertEqual(ledger.unexpected_total, 1)  # ended after the delete was sent
        ledger.record("Generate.session", "normal", "NOT_FOUND", "gone", "a", 1.0, 2.9)
        self.assertEqual(ledger.unexpected_total, 2)  # ended before it
        refused = [4.0, "FAILED_PRECONDITION"]  # a refused delete deletes nothing
        ledger.session("b").deletes.append(refused)
        ledger.record("Score.session", "normal", "NOT_FOUND", "gone", "b", 4.5, 5.0)
        self.assertEqual(ledger.unexpected_total, 3)

    def test_busy_only_while_the_driver_has_a_call_on_it(self):
        ledger = soak_load.Ledger(limits=False, busy_grace=10.0)
        ledger.session("s").created = True
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 1.0, 1.1,
                      inflight_at_send=1)
        self.assertEqual(ledger.unexpected_total, 0)
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 2.0, 2.1)
        self.assertEqual(ledger.unexpected_total, 1)  # idle as far as the driver knows
        ledger.record("Generate.session", "cancel", "CANCELLED", "", "s", 3.0, 4.0)
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 5.0, 5.1)
        self.assertEqual(ledger.unexpected_total, 1)  # within busy_grace of the cut
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 20.0, 20.1)
        self.assertEqual(ledger.unexpected_total, 2)  # a cancelled Generate must let go
        # So must a cut Score: the server stops it too (it used to run to its end).
        ledger.record("Score.session", "deadline", "DEADLINE_EXCEEDED", "", "s", 30.0, 30.2)
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 31.0, 31.1)
        self.assertEqual(ledger.unexpected_total, 2)
        ledger.record("DeleteSession", "normal", "FAILED_PRECONDITION", "busy", "s", 60.0, 60.1)
        self.assertEqual(ledger.unexpected_total, 3)

    def test_rss_growth_is_judged_on_windows_not_single_swings(self):
        # 10 minutes sampled every 2 s, flat at 1000 MB with +-5% swings, warm-up 120 s; at the
        # very end a swing to +20% (three samples of the last four: a median of 3 sees +20%).
        swing = (0.95, 1.0, 1.05, 1.0)
        samples = [[2.0 * i, 1000_000 * swing[i % 4]] for i in range(301)]
        samples[-1][1] = samples[-2][1] = samples[-4][1] = 1_200_000
        flat = soak_server.rss_figures(samples, 120.0, 600.0)
        self.assertLess(abs(flat["growth_pct"]), 1.0)
        # Real growth is still seen: +10% over the run.
        rising = [[t, 1000_000 * (1 + 0.1 * t / 600)] for t, _ in samples]
        grown = soak_server.rss_figures(rising, 120.0, 600.0)
        self.assertGreater(grown["growth_pct"], 6.0)

    def test_log_scan(self):
        lines = [
            "mnemo-server: serving model mnemo-stdlib (6 layers) on 127.0.0.1:1",
            "2026-11-26T21:30:00.123Z Score code=INTERNAL session=s message=\"ERROR in x\"",
            '{"time":"2026-11-26T21:30:00.123Z","method":"Generate","code":"CANCELLED"}',
            "E1126 21:30:00.123456   42 chttp2_transport.cc:1] something broke",
            '{"level":"error","msg":"disk full"}',
            "terminate called after throwing an instance of 'c10::Error'",
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        self.addCleanup(os.unlink, f.name)
        errors, codes = soak_server.scan_log(f.name)
        self.assertEqual(errors, lines[3:])
        self.assertEqual(codes, {"Score": {"INTERNAL": 1}, "Generate": {"CANCELLED": 1}})

    def test_a_server_refusing_the_drill_fails_it(self):
        if not os.access(SERVER, os.X_OK):
            self.skipTest(f"missing binary {SERVER}")
        with tempfile.TemporaryDirectory(prefix="mnemo-soak-") as workdir:
            rc, output, result = run_soak(
                workdir, "--streams", "8", "--seconds", "6", "--kill-interval", "0",
                "--server-arg=--max_new_tokens=4", "--server-arg=--default_max_new_tokens=4",
                timeout=300)
            self.assertEqual(rc, 1, output[-3000:])
            self.assertEqual(result["verdict"], "FAIL")
            self.assertIn("INVALID_ARGUMENT", {u["code"] for u in result["unexpected"]})
            self.assertIn("UNEXPECTED Generate", output)


if __name__ == "__main__":
    unittest.main()
