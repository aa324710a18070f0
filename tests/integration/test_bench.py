#!/usr/bin/python3
"""mnemo-bench against the real mnemo-server: structure and invariants of its outputs.

Starts mnemo-server on a tiny random model (server_harness.py), runs
build/clients/cpp/mnemo-bench with small numbers and checks what it reports: request and token
counts, percentile order, the JSON document, the PNG, the exit status and the error paths
(nothing listening, invalid flags, --max_errors, Ctrl-C). No timing is asserted.

Run by CTest with Debian's /usr/bin/python3. Binaries come from the environment (set by
tests/integration/CMakeLists.txt) or from build/: MNEMO_BENCH, MNEMO_SERVER, MNEMO_MODEL_TOOL.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import server_harness as harness  # noqa: E402

BENCH = os.environ.get("MNEMO_BENCH", os.path.join(harness.BUILD, "clients", "cpp", "mnemo-bench"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MODEL_LAYERS = 2  # what harness.ServerProcess.write_model creates


def run_bench(*args, timeout=120):
    return subprocess.run([BENCH] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout)


def describe(result):
    return (f"exit {result.returncode}\n--- stdout\n{result.stdout.decode(errors='replace')}"
            f"\n--- stderr\n{result.stderr.decode(errors='replace')}")


class BenchTestBase(unittest.TestCase):

    def setUp(self):
        if not os.access(BENCH, os.X_OK):
            self.fail(f"missing binary {BENCH} (build with scripts/build.sh mnemo-bench)")
        self.tmp = tempfile.mkdtemp(prefix="mnemo-bench-test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def load_json(self, name="out.json"):
        with open(self.path(name)) as f:
            return json.load(f)

    def assert_png(self, name="out.png"):
        path = self.path(name)
        self.assertTrue(os.path.isfile(path), f"{path} not written")
        self.assertGreater(os.path.getsize(path), 1000)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)

    def assert_distribution(self, d, count):
        self.assertEqual(d["count"], count)
        if count == 0:
            return
        self.assertGreaterEqual(d["p50"], 0.0)
        self.assertLessEqual(d["p50"], d["p90"])
        self.assertLessEqual(d["p90"], d["p99"])
        self.assertLessEqual(d["p99"], d["max"])
        self.assertLessEqual(d["mean"], d["max"])


class BenchAgainstServerTest(BenchTestBase):
    """One tiny server shared by the tests; each run cleans up its own sessions."""

    @classmethod
    def setUpClass(cls):
        for path in (harness.SERVER, harness.MODEL_TOOL):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"missing binary {path} (build with scripts/build.sh)")
        cls.server, cls.client = harness.start_server(cls)

    def setUp(self):
        super().setUp()
        self.assertIsNone(self.server.proc.poll(),
                          f"mnemo-server died:\n{self.server.log_tail()}")

    def bench(self, *args, timeout=120):
        return run_bench("--target", self.server.address, *args, timeout=timeout)

    def test_fixed_request_count(self):
        streams, requests, new_tokens, prompt = 3, 2, 8, 32
        result = self.bench("--concurrency", streams, "--requests", requests, "--warmup", 1,
                            "--prompt_tokens", prompt, "--max_new_tokens", new_tokens,
                            "--json", self.path("out.json"), "--plot", self.path("out.png"))
        self.assertEqual(result.returncode, 0, describe(result))
        stdout = result.stdout.decode()
        self.assertIn("3 streams: 6 requests (6 ok, 0 failed)", stdout)
        for row in ("TTFT", "ITL", "request", "exit layer", "client CPU"):
            self.assertIn(row, stdout)
        # Progress goes to stderr; not a terminal here, so as plain lines.
        self.assertIn("[3 streams] measure", result.stderr.decode())
        self.assertNotIn("\r", result.stderr.decode())

        doc = self.load_json()
        self.assertEqual(doc["tool"], "mnemo-bench")
        self.assertEqual(doc["config"]["concurrency"], [streams])
        self.assertEqual(doc["config"]["requests_per_stream"], requests)
        self.assertIsNone(doc["config"]["duration_s"])
        self.assertEqual(doc["config"]["sessions"], "fresh")
        self.assertEqual(doc["model"]["layers"], MODEL_LAYERS)
        [level] = doc["levels"]
        total = streams * requests
        self.assertEqual(level["stopped"], "completed")
        self.assertEqual(level["requests"], {"total": total, "ok": total, "failed": 0})
        self.assertEqual(level["warmup"]["requests"], streams)
        self.assertEqual(level["errors"], {})
        self.assertEqual(level["output_tokens"], total * new_tokens)
        self.assertEqual(level["usage_generated_tokens"], total * new_tokens)
        self.assertEqual(level["usage_prompt_tokens"], total * prompt)
        self.assertEqual(level["finish_reasons"], {"LENGTH": total})
        self.assert_distribution(level["ttft_s"], total)
        self.assert_distribution(level["itl_s"], total * (new_tokens - 1))
        self.assert_distribution(level["latency_s"], total)
        self.assertLessEqual(level["ttft_s"]["max"], level["latency_s"]["max"])
        self.assertGreater(level["window_s"], 0)
        self.assertAlmostEqual(level["output_tokens_per_s"],
                               level["output_tokens"] / level["window_s"], places=3)
        # No early exit requested: every token comes from the last layer.
        self.assertEqual(level["exit_layer"]["histogram"], {str(MODEL_LAYERS): total * new_tokens})
        self.assertEqual(level["exit_layer"]["mean"], MODEL_LAYERS)
        self.assertGreaterEqual(level["client_cpu_s"], 0)
        timeline = level["timeline"]
        self.assertGreater(timeline["bucket_s"], 0)
        self.assertGreater(len(timeline["output_tokens_per_s"]), 0)
        self.assert_png()

    def test_sweep_with_reused_sessions(self):
        before = {s.session_id for s in self.client.list_sessions()}
        result = self.bench("--concurrency", "1,2", "--requests", 2, "--warmup", 0,
                            "--sessions", "reuse", "--prompt_tokens", 16, "--max_new_tokens", 4,
                            "--seed", 5, "--temperature", 0.8,
                            "--json", self.path("out.json"), "--plot", self.path("out.png"))
        self.assertEqual(result.returncode, 0, describe(result))
        self.assertIn("speedup", result.stdout.decode())
        doc = self.load_json()
        self.assertEqual(doc["config"]["concurrency"], [1, 2])
        self.assertEqual(doc["config"]["sessions"], "reuse")
        self.assertEqual([lv["concurrency"] for lv in doc["levels"]], [1, 2])
        for level in doc["levels"]:
            total = level["concurrency"] * 2
            self.assertEqual(level["requests"]["ok"], total)
            self.assertEqual(level["output_tokens"], total * 4)
            self.assertEqual(level["usage_prompt_tokens"], total * 16)
            self.assertEqual(level["session_delete_failures"], 0)
        self.assert_png()
        # The sessions it created are gone again.
        after = {s.session_id for s in self.client.list_sessions()}
        self.assertEqual(after, before)

    def test_duration_mode(self):
        result = self.bench("--concurrency", 2, "--duration", "1s", "--warmup", 0,
                            "--prompt_tokens", 8, "--max_new_tokens", 4,
                            "--json", self.path("out.json"))
        self.assertEqual(result.returncode, 0, describe(result))
        doc = self.load_json()
        self.assertEqual(doc["config"]["duration_s"], 1.0)
        self.assertIsNone(doc["config"]["requests_per_stream"])
        [level] = doc["levels"]
        self.assertGreaterEqual(level["requests"]["ok"], 2)
        self.assertEqual(level["requests"]["failed"], 0)
        self.assertEqual(level["output_tokens"], level["requests"]["ok"] * 4)
        self.assertGreaterEqual(level["window_s"], 1.0)

    def test_early_exit_and_prompt_file(self):
        prompt_file = self.path("prompt.txt")
        with open(prompt_file, "w", encoding="utf-8") as f:
            f.write("naïve café — ünïcödé text, cut into windows at character boundaries. " * 3)
        result = self.bench("--concurrency", 2, "--requests", 3, "--prompt_file", prompt_file,
                            "--prompt_tokens", 10, "--max_new_tokens", 3, "--early_exit", "on",
                            "--exit_threshold", 0.5, "--json", self.path("out.json"))
        # Windows cut mid-character would be INVALID_ARGUMENT: all must succeed.
        self.assertEqual(result.returncode, 0, describe(result))
        doc = self.load_json()
        self.assertTrue(doc["config"]["early_exit"])
        self.assertAlmostEqual(doc["config"]["exit_threshold"], 0.5)
        self.assertIsNone(doc["config"]["exit_measure"])
        [level] = doc["levels"]
        self.assertEqual(level["requests"]["ok"], 6)
        self.assertLessEqual(level["usage_prompt_tokens"], 6 * 10)
        self.assertGreater(level["usage_prompt_tokens"], 6 * 10 - 6 * 3)
        self.assertGreaterEqual(level["exit_layer"]["mean"], 1)
        self.assertLessEqual(level["exit_layer"]["mean"], MODEL_LAYERS)

    def test_exit_measure_reaches_the_server(self):
        # Saturation with an explicit threshold is served on any model; the test model has no
        # exit classifier, so every classifier request is INVALID_ARGUMENT naming the field.
        result = self.bench("--concurrency", 1, "--requests", 2, "--warmup", 0,
                            "--prompt_tokens", 10, "--max_new_tokens", 3, "--early_exit", "on",
                            "--exit_measure", "saturation", "--exit_threshold", 0.5,
                            "--json", self.path("out.json"))
        self.assertEqual(result.returncode, 0, describe(result))
        doc = self.load_json()
        self.assertEqual(doc["config"]["exit_measure"], "saturation")
        [level] = doc["levels"]
        self.assertEqual(level["requests"]["ok"], 2)
        result = self.bench("--concurrency", 1, "--requests", 2, "--warmup", 0,
                            "--prompt_tokens", 10, "--max_new_tokens", 3, "--early_exit", "on",
                            "--exit_measure", "classifier", "--exit_threshold", 0.5,
                            "--json", self.path("out.json"))
        self.assertEqual(result.returncode, 1, describe(result))
        [level] = self.load_json()["levels"]
        self.assertEqual(level["errors"]["INVALID_ARGUMENT"]["count"], 2)
        self.assertIn("early_exit.measure",
                      level["errors"]["INVALID_ARGUMENT"]["first_message"])

    def interrupt_bench(self):
        """Runs a long bench, sends it Ctrl-C after 3 s, checks what every interrupted run must
        report, and returns its level."""
        proc = subprocess.Popen(
            [BENCH, "--target", self.server.address, "--concurrency", "2", "--requests", "1000",
             "--warmup", "0", "--max_new_tokens", str(harness.MAX_NEW_TOKENS_CAP),
             "--json", self.path("out.json")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # Long enough for both streams to have started, even on a loaded CI machine (one
            # run with 1.5 s found no request to cancel); from then on each stream always has a
            # request in flight.
            time.sleep(3.0)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 130, stderr.decode(errors="replace"))
        self.assertIn(b"stopped: interrupted", stdout)
        [level] = self.load_json()["levels"]
        self.assertEqual(level["stopped"], "interrupted")
        # Nothing but cancellations failed, and every request is accounted for.
        self.assertEqual(set(level["errors"]) - {"CANCELLED"}, set(), level)
        cancelled = level["errors"].get("CANCELLED", {}).get("count", 0)
        self.assertEqual(level["requests"]["failed"], cancelled)
        self.assertEqual(level["requests"]["total"], level["requests"]["ok"] + cancelled)
        self.assertEqual(self.server.proc.poll(), None)
        return level

    def test_ctrl_c_reports_partial_results(self):
        # The requests in flight (one per stream, unless one had just ended) are cancelled, not
        # left running. (How many completed before the signal depends on the server's speed and
        # on where the random model emits EOS.) The two streams decode in one batch with equal
        # lengths, so they end in the same step: when the signal lands in the few milliseconds
        # before that step (the bench notices it within 5 ms), both end normally and there is
        # nothing to cancel — right, but not what this test is after, so such a run is retried.
        for attempt in range(3):
            level = self.interrupt_bench()
            if "CANCELLED" in level["errors"]:
                break
        self.assertIn("CANCELLED", level["errors"], level)
        self.assertIn(level["errors"]["CANCELLED"]["count"], (1, 2))


class BenchErrorTest(BenchTestBase):
    """Errors without a server: nothing listening, bad flags."""

    def test_nothing_listening_counts_unavailable(self):
        target = f"127.0.0.1:{harness.free_port()}"  # free, so nothing listens there
        result = run_bench("--target", target, "--concurrency", 2, "--requests", 2,
                           "--warmup", 0, "--json", self.path("out.json"),
                           "--plot", self.path("out.png"))
        self.assertEqual(result.returncode, 1, describe(result))
        stderr = result.stderr.decode()
        self.assertIn("4 of 4 requests failed with UNAVAILABLE", stderr)
        self.assertIn("UNAVAILABLE", result.stdout.decode())
        [level] = self.load_json()["levels"]
        self.assertEqual(level["requests"], {"total": 4, "ok": 0, "failed": 4})
        self.assertEqual(level["errors"]["UNAVAILABLE"]["count"], 4)
        self.assertTrue(level["errors"]["UNAVAILABLE"]["first_message"])
        self.assertEqual(level["output_tokens"], 0)
        self.assertEqual(level["ttft_s"]["count"], 0)
        self.assert_png()  # drawn even so, with its empty panels labelled

    def test_max_errors_stops_a_timed_run(self):
        target = f"127.0.0.1:{harness.free_port()}"
        result = run_bench("--target", target, "--concurrency", "1,4", "--duration", "60s",
                           "--max_errors", 5, "--progress=false", timeout=60)
        self.assertEqual(result.returncode, 1, describe(result))
        stderr = result.stderr.decode()
        self.assertIn("stopped after 5 failed requests (--max_errors); remaining levels skipped",
                      stderr)
        self.assertIn("stopped: max_errors", result.stdout.decode())
        self.assertNotIn("4 streams", result.stdout.decode())

    def test_reuse_without_server_is_a_clear_error(self):
        target = f"127.0.0.1:{harness.free_port()}"
        result = run_bench("--target", target, "--sessions", "reuse", "--requests", 1)
        self.assertEqual(result.returncode, 1, describe(result))
        self.assertIn("cannot create session 1 of 1", result.stderr.decode())
        self.assertIn("UNAVAILABLE", result.stderr.decode())

    def test_invalid_flags(self):
        cases = [
            (["--concurrency", "0"], "--concurrency"),
            (["--concurrency", "1,x"], "--concurrency"),
            (["--requests", "2", "--duration", "1s"], "not both"),
            (["--requests", "-1"], "--requests"),
            (["--max_new_tokens", "0"], "--max_new_tokens"),
            (["--sessions", "shared"], "--sessions must be fresh, reuse or remember"),
            (["--early_exit", "yes"], "--early_exit must be on or off"),
            (["--exit_threshold", "0.5"], "--exit_threshold needs --early_exit on"),
            (["--early_exit", "on", "--exit_threshold", "1.5"], "--exit_threshold must be"),
            (["--exit_measure", "classifier"], "--exit_measure needs --early_exit on"),
            (["--early_exit", "on", "--exit_measure", "entropy"],
             "--exit_measure must be softmax, saturation or classifier"),
            (["--temperature", "-1"], "--temperature"),
            (["--deadline", "0s"], "--deadline"),
            (["--prompt_tokens", "0"], "--sessions reuse"),
            (["--prompt_file", self.path("missing.txt")], "cannot read prompt file"),
            (["positional"], "unexpected argument 'positional'"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                result = run_bench(*args, timeout=30)
                self.assertEqual(result.returncode, 2, describe(result))
                self.assertIn(message, result.stderr.decode())
                self.assertEqual(result.stdout, b"")
        # Flag syntax errors are reported by the flags library.
        result = run_bench("--no_such_flag", timeout=30)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no_such_flag", result.stderr.decode())
        result = run_bench("--max_new_tokens", "many", timeout=30)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("max_new_tokens", result.stderr.decode())


if __name__ == "__main__":
    unittest.main()
