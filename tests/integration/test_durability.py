#!/usr/bin/python3
"""Durable sessions with real processes: kill -9 under load, restart, nothing acknowledged lost.

A mnemo-server with --session_dir serves 16 sessions, one client thread each, mixing
Score(update_memory=True) and greedy Generate calls. After every call that returned OK the
thread records the session's tokens_seen and the log-probs of a probe text (a Score that does
not change the session). The server is killed with SIGKILL mid-traffic and restarted on the same
directory; then, for every session:
  - tokens_seen is at least what the last acknowledged call reported (nothing acknowledged is
    lost; more is allowed: a call can reach the disk and die before its answer does), and
  - when it equals the last probe's tokens_seen, the probe's log-probs are equal, bit for bit.
A second test corrupts one session's snapshot and checks that only that session fails, with
DATA_LOSS naming the file.

Run by CTest with Debian's /usr/bin/python3 (MNEMO_SERVER, MNEMO_MODEL_TOOL from the
environment or build/).
"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import grpc  # noqa: E402

import server_harness as harness  # noqa: E402
from mnemo_client import Client, MnemoError  # noqa: E402

SESSIONS = 16
LOAD_SECONDS = 6.0
PROBE = "A probe text the restarted server must score exactly as before."
WORDS = ("memory ring segment token stream replica router snapshot log delta session "
         "kernel vector window anchor harbour lantern").split()


class Drill:
    """One client thread's record of its session."""

    def __init__(self, sid: str):
        self.sid = sid
        self.acked_tokens = 0       # tokens_seen after the last call that returned OK
        self.probe_tokens = -1      # tokens_seen when `probe` was taken
        self.probe = None
        self.calls = 0
        self.errors = []


def _traffic(address: str, drill: Drill, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    client = Client(address, timeout=30)
    try:
        while not stop.is_set():
            if rng.random() < 0.5:
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) + ". "
                client.score(text, session_id=drill.sid, update_memory=True)
                tokens = client.get_session(drill.sid).tokens_seen
            else:
                last = None
                for chunk in client.generate(rng.choice(WORDS) + " ", session_id=drill.sid,
                                             max_new_tokens=rng.randint(1, 12), temperature=0):
                    last = chunk
                if last is None or last.finish_reason not in ("LENGTH", "STOP", "EOS"):
                    continue
                tokens = last.usage.session_tokens
            drill.acked_tokens = tokens
            drill.calls += 1
            probe = client.score(PROBE, session_id=drill.sid, token_logprobs=True)
            drill.probe_tokens = tokens
            drill.probe = probe.logprobs
    except MnemoError as error:  # the kill: UNAVAILABLE, or a stream cut short
        if not stop.is_set():
            drill.errors.append(str(error))
    finally:
        client.close()


class DurabilityDrillTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="mnemo-durability-")
        self.addCleanup(shutil.rmtree, self.workdir, ignore_errors=True)
        self.session_dir = os.path.join(self.workdir, "sessions")

    def start(self):
        return harness.launch(self.workdir, ["--session_dir", self.session_dir], self.addCleanup)

    def test_kill_9_under_load_loses_nothing_acknowledged(self):
        server, client = self.start()
        drills = [Drill(f"drill-{i:02d}") for i in range(SESSIONS)]
        for d in drills:
            client.create_session(d.sid, remember=(int(d.sid[-2:]) % 2 == 1))
        stop = threading.Event()
        threads = [threading.Thread(target=_traffic, args=(server.address, d, stop, i))
                   for i, d in enumerate(drills)]
        for t in threads:
            t.start()
        time.sleep(LOAD_SECONDS)
        stop.set()  # errors from here on are the kill's; calls in flight are cut by it
        server.proc.kill()  # SIGKILL, mid-traffic
        server.proc.wait(timeout=30)
        for t in threads:
            t.join(timeout=60)
        for d in drills:
            self.assertEqual(d.errors, [], d.sid)
        self.assertGreater(sum(d.calls for d in drills), SESSIONS, "too little traffic")

        server2, client2 = self.start()
        exact = 0
        for d in drills:
            info = client2.get_session(d.sid)
            self.assertGreaterEqual(info.tokens_seen, d.acked_tokens, d.sid)
            if d.probe is not None and info.tokens_seen == d.probe_tokens:
                again = client2.score(PROBE, session_id=d.sid, token_logprobs=True).logprobs
                self.assertEqual(again, d.probe, f"{d.sid}: probe log-probs differ")
                exact += 1
        # A session is comparable when the kill found it after its probe and before its next
        # call's answer: about half of them (a cycle is one call, then one probe).
        self.assertGreaterEqual(exact, 2, "too few sessions could be compared")
        # The restored sessions take new calls.
        for d in drills[:4]:
            client2.score("and more", session_id=d.sid, update_memory=True)
        print(f"\n[durability] {sum(d.calls for d in drills)} calls acknowledged before the "
              f"kill; {exact}/{SESSIONS} sessions compared bit for bit after restart",
              file=sys.stderr)

    def test_damaged_snapshot_fails_only_its_session(self):
        server, client = self.start()
        for sid in ("good", "bad"):
            client.create_session(sid)
            client.score("Some text to remember. " * 4, session_id=sid, update_memory=True)
        probe = client.score(PROBE, session_id="good", token_logprobs=True).logprobs
        server.stop()
        path = os.path.join(self.session_dir, "bad.snap")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        server2, client2 = self.start()
        with self.assertRaises(MnemoError) as caught:
            client2.get_session("bad")
        self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)
        self.assertIn("bad.snap", str(caught.exception))
        self.assertEqual(client2.score(PROBE, session_id="good", token_logprobs=True).logprobs,
                         probe)
        self.assertIsNone(server2.proc.poll(), "the server must not crash on a bad file")

    def test_export_import_and_fork(self):
        server, client = self.start()
        client.create_session("origin", remember=True)
        client.score("The origin session reads this text. " * 6, session_id="origin",
                     update_memory=True)
        probe = client.score(PROBE, session_id="origin", token_logprobs=True).logprobs

        # Export + import (Python): the copy answers exactly as the original.
        snapshot = client.export_session("origin")
        self.assertTrue(snapshot.startswith(b"MNEMOSNP"))
        copy = client.import_session(snapshot, "copy")
        self.assertEqual(copy.tokens_seen, client.get_session("origin").tokens_seen)
        self.assertEqual(client.score(PROBE, session_id="copy", token_logprobs=True).logprobs,
                         probe)
        with self.assertRaises(MnemoError) as caught:
            client.import_session(snapshot, "copy")
        self.assertEqual(caught.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        damaged = bytearray(snapshot)
        damaged[len(damaged) // 2] ^= 0xFF
        with self.assertRaises(MnemoError) as caught:
            client.import_session(bytes(damaged), "damaged")
        self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)
        with self.assertRaises(MnemoError) as caught:
            client.import_session(b"not a snapshot", "junk")
        self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)

        # Fork: the branch starts equal and then goes its own way.
        branch = client.fork_session("origin", "branch")
        self.assertEqual(branch.session_id, "branch")
        self.assertEqual(client.score(PROBE, session_id="branch", token_logprobs=True).logprobs,
                         probe)
        client.score("Only the branch reads this.", session_id="branch", update_memory=True)
        self.assertNotEqual(
            client.score(PROBE, session_id="branch", token_logprobs=True).logprobs, probe)
        self.assertEqual(client.score(PROBE, session_id="origin", token_logprobs=True).logprobs,
                         probe)

        # The CLI: export to a file, import under a new id.
        path = os.path.join(self.workdir, "origin.snap")
        cli = [harness.CLI, "--address", server.address, "--timeout", "30s"]
        out = subprocess.run(cli + ["session", "export", "origin", path], capture_output=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        out = subprocess.run(cli + ["session", "import", path, "--id", "via-cli"],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.decode().strip(), "via-cli")
        out = subprocess.run(cli + ["session", "fork", "via-cli", "--id", "cli-branch"],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(client.score(PROBE, session_id="cli-branch",
                                      token_logprobs=True).logprobs, probe)

        # Everything imported or forked is durable like any session.
        server.stop()
        server2, client2 = self.start()
        for sid in ("copy", "branch", "via-cli", "cli-branch", "origin"):
            client2.get_session(sid)
        self.assertEqual(client2.score(PROBE, session_id="copy", token_logprobs=True).logprobs,
                         probe)


if __name__ == "__main__":
    unittest.main()
