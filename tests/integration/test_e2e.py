#!/usr/bin/python3
"""End-to-end: the real mnemo-server binary, the Python client and the `mnemo` CLI.

Writes a tiny random model with mnemo-model, starts mnemo-server on free loopback ports, waits
for mnemo.v1.Generation to report SERVING, and exercises the public API the way a user would.

Run by scripts/test.sh through CTest with Debian's /usr/bin/python3 (its python3-grpcio).
Binaries come from the environment (set by tests/integration/CMakeLists.txt) or from build/:
  MNEMO_SERVER, MNEMO_MODEL_TOOL, MNEMO_CLI
The server process is always stopped, whatever fails.
"""

import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import grpc  # noqa: E402

from server_harness import (  # noqa: E402
    CLI, MAX_NEW_TOKENS_CAP, MODEL_TOOL, SERVER, start_server)
from mnemo_client import MnemoError  # noqa: E402
from mnemo_client import _stubs  # noqa: E402


class EndToEndTest(unittest.TestCase):
    """One server shared by the API tests (each test uses its own sessions)."""

    @classmethod
    def setUpClass(cls):
        for path in (SERVER, MODEL_TOOL, CLI):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"missing binary {path} (build with scripts/build.sh)")
        cls.server, cls.client = start_server(cls)

    def setUp(self):
        self.assertIsNone(self.server.proc.poll(),
                          f"mnemo-server died:\n{self.server.log_tail()}")

    def run_cli(self, *args, timeout=60):
        return subprocess.run([CLI, "--address", self.server.address, "--timeout", "30s"]
                              + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)

    # --- health, reflection, models ----------------------------------------------------------

    def test_health_serving(self):
        self.assertEqual(self.client.health("mnemo.v1.Generation"), "SERVING")
        self.assertEqual(self.client.health(""), "SERVING")

    def test_reflection_lists_services(self):
        # What grpcurl does first: list services over v1alpha reflection.
        channel = grpc.insecure_channel(self.server.address)
        self.addCleanup(channel.close)
        stub = _stubs.reflection_pb2_grpc.ServerReflectionStub(channel)
        request = _stubs.reflection_pb2.ServerReflectionRequest(list_services="")
        responses = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        names = {s.name for s in responses[0].list_services_response.service}
        for service in ("mnemo.v1.Generation", "mnemo.v1.Sessions", "mnemo.v1.Models",
                        "grpc.health.v1.Health"):
            self.assertIn(service, names)

    def test_models(self):
        models = self.client.models()
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].layers, 2)
        self.assertEqual(models[0].d_model, 64)
        self.assertEqual(models[0].heads, 2)
        self.assertEqual(models[0].mem_len, 32)
        self.assertGreater(models[0].parameters, 0)
        self.assertEqual(models[0].family, "mnemo-xl")
        self.assertEqual(models[0].tokenizer, "byte")
        self.assertEqual(models[0].weight_dtype, "float32")
        self.assertEqual(models[0].window, 32)
        self.assertEqual(models[0].sink_tokens, 0)

    # --- token ids (issue 21) -----------------------------------------------------------------

    def test_token_ids_round_trip_and_match_text(self):
        ids = self.client.tokenize("Hi é", add_special_tokens=True)
        self.assertEqual(ids[0], 256)  # the byte models' BOS
        self.assertEqual(ids[1:], self.client.tokenize("Hi é"))
        self.assertEqual(self.client.detokenize(ids, skip_special_tokens=True), "Hi é")
        self.assertEqual(self.client.detokenize(ids), "<|bos|>Hi é")
        with self.assertRaises(MnemoError) as caught:
            self.client.detokenize([1, 999])
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("ids[1] = 999", caught.exception.message)

        by_text = self.client.generate("Hi é", max_new_tokens=16, temperature=0.7, seed=5,
                                       stop_at_eos=False).text()
        by_ids = self.client.generate(prompt_token_ids=ids, max_new_tokens=16, temperature=0.7,
                                      seed=5, stop_at_eos=False).text()
        self.assertEqual(by_ids, by_text)
        text_score = self.client.score("Hi é")
        ids_score = self.client.score(token_ids=ids)
        self.assertEqual(ids_score.token_count, text_score.token_count)
        self.assertEqual(ids_score.byte_count, len("Hi é".encode()))
        self.assertAlmostEqual(ids_score.total_logprob, text_score.total_logprob, places=3)
        with self.assertRaises(MnemoError) as caught:
            list(self.client.generate(prompt_token_ids=[1, 2, -3]))
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("prompt_token_ids[2]", caught.exception.message)
        with self.assertRaises(TypeError):
            self.client.generate(prompt_token_ids="not ids")

    def test_sampling_knobs_and_stop_token_ids(self):
        stream = self.client.generate("abc", max_new_tokens=8, temperature=0,
                                      logit_bias={ord("x"): 100.0}, stop_at_eos=False)
        self.assertEqual(stream.text(), "x" * 8)
        stream = self.client.generate("abc", max_new_tokens=8, temperature=0,
                                      logit_bias={ord("x"): 100.0},
                                      stop_token_ids=[ord("x")], stop_at_eos=False)
        self.assertEqual(stream.text(), "x")
        self.assertEqual(stream.finish_reason, "STOP")
        chunks = list(self.client.generate("abc", max_new_tokens=8, temperature=0.8, seed=2,
                                           min_p=0.1, presence_penalty=0.5,
                                           frequency_penalty=0.5, stop_at_eos=False))
        self.assertEqual(sum(len(c.tokens) for c in chunks), 8)
        with self.assertRaises(MnemoError) as caught:
            list(self.client.generate("abc", min_p=2.0))
        self.assertIn("sampling.min_p", caught.exception.message)

    # --- generation ---------------------------------------------------------------------------

    def test_streaming_arrives_in_several_chunks(self):
        stream = self.client.generate("Hello, mnemo.", max_new_tokens=64, seed=3,
                                      stop_at_eos=False)
        chunks = list(stream)
        self.assertGreaterEqual(len(chunks), 2, "the whole generation arrived as one chunk")
        # Deltas: only the last chunk carries the finish reason and usage.
        for chunk in chunks[:-1]:
            self.assertIsNone(chunk.finish_reason)
        self.assertEqual(chunks[-1].finish_reason, "LENGTH")
        self.assertEqual(stream.usage.generated_tokens, 64)
        self.assertEqual(stream.usage.prompt_tokens, len("Hello, mnemo.".encode()))
        self.assertEqual(sum(len(c.tokens) for c in chunks), 64)
        self.assertEqual("".join(c.text for c in chunks),
                         "".join(t.text for c in chunks for t in c.tokens))

    def test_seeded_generation_is_deterministic(self):
        def run(seed):
            chunks = list(self.client.generate("Determinism", max_new_tokens=32,
                                               temperature=1.0, seed=seed,
                                               stop_at_eos=False))
            return [t.id for c in chunks for t in c.tokens], "".join(c.text for c in chunks)

        first, second = run(1234), run(1234)
        self.assertEqual(first, second)
        self.assertEqual(len(first[0]), 32)
        self.assertNotEqual(run(99)[0], first[0], "different seeds gave the same 32 tokens")

    def test_logprobs(self):
        chunks = list(self.client.generate("abc", max_new_tokens=4, temperature=0, logprobs=3,
                                           stop_at_eos=False))
        tokens = [t for c in chunks for t in c.tokens]
        self.assertEqual(len(tokens), 4)
        for token in tokens:
            self.assertLessEqual(token.logprob, 0.0)
            self.assertEqual(len(token.top_logprobs), 3)
            # Greedy: the chosen token is the most likely alternative.
            self.assertEqual(token.id, token.top_logprobs[0].id)

    def test_stop_string(self):
        # Greedy output is fixed for the model; use a piece of it as the stop string.
        # A random model's output is mostly stray bytes (U+FFFD), so stop on the clean character
        # that first appears latest in it.
        full = self.client.generate("stop test", max_new_tokens=24, temperature=0,
                                    stop_at_eos=False).text()
        clean = [c for c in set(full) if c != "\ufffd"]
        if not clean:
            self.skipTest(f"greedy output has no clean character to stop on: {full!r}")
        stop = max(clean, key=full.index)
        expected = full[:full.index(stop) + 1]
        stream = self.client.generate("stop test", max_new_tokens=24, temperature=0,
                                      stop=[stop], stop_at_eos=False)
        text = stream.text()
        self.assertEqual(stream.finish_reason, "STOP")
        self.assertEqual(text, expected)
        self.assertEqual(stream.usage.generated_tokens, len(expected.encode()))

    def test_session_create_generate_get(self):
        session = self.client.create_session()
        self.assertTrue(session.session_id)
        self.assertEqual(session.tokens_seen, 0)
        stream = self.client.generate("remember me", session_id=session.session_id,
                                      max_new_tokens=8, stop_at_eos=False)
        stream.text()
        self.assertEqual(stream.usage.prompt_tokens, 11)
        self.assertEqual(stream.usage.generated_tokens, 8)
        info = self.client.get_session(session.session_id)
        self.assertEqual(info.tokens_seen, 19)
        self.assertEqual(stream.usage.session_tokens, 19)
        self.assertGreater(info.memory.bytes, 0)
        self.assertGreater(info.memory.xl_tokens, 0)
        # A second call continues the session; an empty prompt is fine with a session.
        stream = self.client.generate("", session_id=session.session_id, max_new_tokens=5,
                                      stop_at_eos=False)
        stream.text()
        self.assertEqual(stream.usage.session_tokens, 24)
        self.assertIn(session.session_id,
                      [s.session_id for s in self.client.list_sessions()])
        self.client.delete_session(session.session_id)
        with self.assertRaises(MnemoError) as ctx:
            self.client.get_session(session.session_id)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_client_chosen_session_id(self):
        session = self.client.create_session("e2e-chosen.id_1")
        self.assertEqual(session.session_id, "e2e-chosen.id_1")
        with self.assertRaises(MnemoError) as ctx:
            self.client.create_session("e2e-chosen.id_1")
        self.assertEqual(ctx.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        self.client.delete_session("e2e-chosen.id_1")

    def test_score(self):
        text = "The cat sat on the mat."
        result = self.client.score(text, token_logprobs=True)
        self.assertEqual(result.byte_count, len(text.encode()))
        self.assertEqual(result.token_count, len(text.encode()))
        self.assertLess(result.total_logprob, 0.0)
        self.assertAlmostEqual(result.bits_per_byte,
                               -result.total_logprob / math.log(2) / result.byte_count,
                               places=4)
        self.assertEqual(len(result.logprobs), result.token_count)
        self.assertAlmostEqual(sum(result.logprobs), result.total_logprob, places=2)
        self.assertEqual(self.client.tokenize(text), list(text.encode()))

    def test_score_update_memory_and_memory_effect(self):
        session = self.client.create_session()
        self.addCleanup(self.client.delete_session, session.session_id)
        first = self.client.score("a first document. " * 4, session_id=session.session_id,
                                  update_memory=True)
        info = self.client.get_session(session.session_id)
        self.assertEqual(info.tokens_seen, first.token_count)
        # The same text scores differently with that memory than in a fresh context.
        with_memory = self.client.score("second text", session_id=session.session_id)
        fresh = self.client.score("second text")
        self.assertNotAlmostEqual(with_memory.total_logprob, fresh.total_logprob, places=5)
        # Scoring without update_memory leaves the session as it was.
        self.assertEqual(self.client.get_session(session.session_id).tokens_seen,
                         first.token_count)

    def test_cancel_mid_stream(self):
        session = self.client.create_session()
        self.addCleanup(self.client.delete_session, session.session_id)
        stream = self.client.generate("cancel me", session_id=session.session_id,
                                      max_new_tokens=MAX_NEW_TOKENS_CAP, stop_at_eos=False)
        received = 0
        for chunk in stream:
            received += len(chunk.tokens)
            if received >= 2:
                stream.cancel()
        self.assertGreaterEqual(received, 2)
        self.assertLess(received, MAX_NEW_TOKENS_CAP)
        # The session keeps what was sent, and is free again within a moment.
        deadline = time.monotonic() + 10
        info = self.client.get_session(session.session_id)
        while info.busy and time.monotonic() < deadline:
            time.sleep(0.05)
            info = self.client.get_session(session.session_id)
        self.assertFalse(info.busy, "session still busy 10 s after the cancel")
        self.assertGreaterEqual(info.tokens_seen, 9 + received)
        self.assertLess(info.tokens_seen, 9 + MAX_NEW_TOKENS_CAP)
        # The server goes on serving, and the session goes on working.
        after = self.client.generate("", session_id=session.session_id, max_new_tokens=3,
                                     stop_at_eos=False)
        after.text()
        self.assertEqual(after.usage.session_tokens, info.tokens_seen + 3)

    def test_score_stops_when_its_deadline_passes(self):
        session = self.client.create_session()
        self.addCleanup(self.client.delete_session, session.session_id)
        text = "A long document, far longer than its deadline allows. " * 20000  # 1.1 MB
        started = time.monotonic()
        with self.assertRaises(MnemoError) as caught:
            self.client.score(text, session_id=session.session_id, update_memory=True,
                              timeout=0.5)
        self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        # The server stops scoring too: the session is free again within a moment (scoring
        # all of it would hold it for tens of seconds), keeping the part it read.
        info = self.client.get_session(session.session_id)
        while info.busy and time.monotonic() - started < 10:
            time.sleep(0.05)
            info = self.client.get_session(session.session_id)
        self.assertFalse(info.busy, "session still busy 10 s after the Score's deadline")
        self.assertLess(info.tokens_seen, len(text))
        after = self.client.score("and on", session_id=session.session_id, update_memory=True)
        self.assertEqual(self.client.get_session(session.session_id).tokens_seen,
                         info.tokens_seen + after.token_count)

    def test_bad_input_is_invalid_argument(self):
        bad = [
            dict(prompt="x", temperature=-1.0),
            dict(prompt="x", top_p=1.5),
            dict(prompt="x", top_p=0.0),
            dict(prompt="x", max_new_tokens=MAX_NEW_TOKENS_CAP + 1),
            dict(prompt=""),  # empty prompt without a session
            dict(prompt="x", repetition_penalty=0.0),
            dict(prompt="x", logprobs=-1),
            # The test model has no exit classifier and no calibrated threshold.
            dict(prompt="x", early_exit=True, exit_measure="classifier", exit_threshold=0.5),
            dict(prompt="x", early_exit=True, exit_measure="saturation"),
        ]
        for kwargs in bad:
            with self.subTest(**kwargs):
                with self.assertRaises(MnemoError) as ctx:
                    self.client.generate(**kwargs).text()
                self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT,
                                 ctx.exception)
                self.assertTrue(ctx.exception.message)
        with self.assertRaises(MnemoError) as ctx:
            self.client.score("")
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(ValueError):  # refused by the client, before any call
            self.client.generate("x", early_exit=True, exit_measure="entropy")
        # A measure the model can serve, with a threshold: every token reports its layer.
        chunks = list(self.client.generate("x", max_new_tokens=4, temperature=0,
                                           stop_at_eos=False, early_exit=True,
                                           exit_measure="saturation", exit_threshold=0.5))
        layers = [t.exit_layer for c in chunks for t in c.tokens]
        self.assertEqual(len(layers), 4)
        self.assertTrue(all(layer >= 1 for layer in layers), layers)

    def test_unknown_session_is_not_found(self):
        calls = [
            lambda: self.client.generate("x", session_id="no-such-session").text(),
            lambda: self.client.score("x", session_id="no-such-session"),
            lambda: self.client.get_session("no-such-session"),
            lambda: self.client.delete_session("no-such-session"),
        ]
        for i, call in enumerate(calls):
            with self.subTest(call=i):
                with self.assertRaises(MnemoError) as ctx:
                    call()
                self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    # --- metrics ------------------------------------------------------------------------------

    def test_metrics_scrape(self):
        self.client.generate("metrics", max_new_tokens=4, stop_at_eos=False).text()
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            self.assertEqual(response.status, 200)
            body = response.read().decode()
        for name in ("mnemo_time_to_first_token_seconds", "mnemo_generated_tokens_total",
                     "mnemo_prompt_tokens_total", "mnemo_sessions", "mnemo_resident_bytes",
                     "mnemo_heap_trims_total"):
            self.assertIn(name, body)
        promtool = shutil.which("promtool")
        if promtool:
            check = subprocess.run([promtool, "check", "metrics"], input=body.encode(),
                                   capture_output=True, timeout=30)
            self.assertEqual(check.returncode, 0,
                             (check.stdout + check.stderr).decode(errors="replace"))

    # --- the C++ CLI --------------------------------------------------------------------------

    def test_cli_health(self):
        result = self.run_cli("health")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), b"SERVING")
        unknown = self.run_cli("health", "--service", "no.such.Service")
        self.assertNotEqual(unknown.returncode, 0)

    def test_cli_generate_streams_same_text_as_python(self):
        args = ["--max_new_tokens", "24", "--temperature", "0.9", "--seed", "42"]
        proc = subprocess.Popen(
            [CLI, "--address", self.server.address, "generate"] + args + ["CLI prompt"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, stderr)
        self.assertIn(b"finish_reason=LENGTH", stderr)
        self.assertIn(b"generated_tokens=24", stderr)
        python_text = self.client.generate("CLI prompt", max_new_tokens=24, temperature=0.9,
                                           seed=42).text()
        self.assertEqual(stdout, python_text.encode() + b"\n")

    def test_recall_through_python_and_cli(self):
        # A code stated once, 3 KB of other bytes, then the statement's prefix: a session
        # created with remember gives the code back (the tiny random model cannot on its own).
        rng = random.Random(7)
        filler = "".join(rng.choice("abcdefghij \n") for _ in range(3000))
        prompt = ("The vault code is 83Q1Z7. Remember it.\n" + filler +
                  "\nWhat is the vault code? The vault code is ")
        remembers = self.client.create_session(remember=True)
        forgets = self.client.create_session()
        def answer(session_id, **kwargs):
            return "".join(c.text for c in self.client.generate(
                prompt, session_id=session_id, max_new_tokens=6, temperature=0, **kwargs))
        self.assertEqual(answer(remembers.session_id), "83Q1Z7")
        self.assertNotEqual(answer(forgets.session_id), "83Q1Z7")
        info = self.client.get_session(remembers.session_id)
        self.assertEqual(info.memory.remembered_tokens, info.tokens_seen + 1)  # + BOS
        with self.assertRaises(MnemoError) as raised:
            answer(forgets.session_id, recall=True)
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(MnemoError) as raised:
            answer("", recall={"max_lambda": 2.0})
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("recall.max_lambda", raised.exception.message)
        # The CLI: session create --remember, then generate on it.
        created = self.run_cli("session", "create", "--remember")
        self.assertEqual(created.returncode, 0, created.stderr)
        sid = created.stdout.decode().strip()
        generated = self.run_cli("generate", "--session", sid, "--max_new_tokens", "6",
                                 "--temperature", "0", prompt)
        self.assertEqual(generated.returncode, 0, generated.stderr)
        self.assertEqual(generated.stdout, b"83Q1Z7\n")
        got = self.run_cli("session", "get", sid)
        self.assertIn(b"remembered_tokens=", got.stdout)
        bad = self.run_cli("generate", "--recall", "maybe", "x")
        self.assertEqual(bad.returncode, 2)

    def test_cli_sessions_score_and_errors(self):
        created = self.run_cli("session", "create", "--id", "cli-session")
        self.assertEqual(created.returncode, 0, created.stderr)
        self.assertEqual(created.stdout.strip(), b"cli-session")
        score = self.run_cli("score", "--session", "cli-session", "--update_memory", "hello")
        self.assertEqual(score.returncode, 0, score.stderr)
        self.assertIn(b"tokens=5", score.stdout)
        got = self.run_cli("session", "get", "cli-session")
        self.assertEqual(got.returncode, 0, got.stderr)
        self.assertIn(b"tokens_seen: 5", got.stdout)
        listed = self.run_cli("session", "list")
        self.assertIn(b"cli-session", listed.stdout)
        self.assertEqual(self.run_cli("session", "delete", "cli-session").returncode, 0)
        missing = self.run_cli("session", "get", "cli-session")
        self.assertEqual(missing.returncode, 1)
        self.assertIn(b"NOT_FOUND", missing.stderr)
        bad = self.run_cli("generate", "--temperature", "-2", "x")
        self.assertEqual(bad.returncode, 1)
        self.assertIn(b"INVALID_ARGUMENT", bad.stderr)
        models = self.run_cli("models")
        self.assertEqual(models.returncode, 0, models.stderr)
        self.assertIn(b"layers=2", models.stdout)
        tokens = self.run_cli("tokenize", "hi")
        self.assertEqual(tokens.stdout.strip(), b"2 tokens: 104 105")
        tokens = self.run_cli("tokenize", "--add_special_tokens", "hi")
        self.assertEqual(tokens.stdout.strip(), b"3 tokens: 256 104 105")
        text = self.run_cli("detokenize", "--skip_special_tokens", "256,104 105")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertEqual(text.stdout, b"hi\n")
        self.assertIn(b"family=mnemo-xl", models.stdout)
        scored = self.run_cli("score", "--ids", "256,104,105")
        self.assertEqual(scored.returncode, 0, scored.stderr)
        self.assertIn(b"tokens=2", scored.stdout)
        generated = self.run_cli("generate", "--ids", "--max_new_tokens", "4",
                                 "--temperature", "0", "--logit_bias", "120=100",
                                 "--stop_token_ids", "120", "256,104")
        self.assertEqual(generated.returncode, 0, generated.stderr)
        self.assertEqual(generated.stdout, b"x\n")
        self.assertIn(b"finish_reason=STOP", generated.stderr)


class ShutdownTest(unittest.TestCase):
    """SIGTERM drains in-flight streams and exits 0 (its own server: it stops it)."""

    @classmethod
    def setUpClass(cls):
        cls.server, cls.client = start_server(cls)

    def test_sigterm_drains_and_exits_zero(self):
        stream = self.client.generate("drain", max_new_tokens=200, stop_at_eos=False,
                                      timeout=60)
        chunks = [next(stream)]
        self.server.proc.send_signal(signal.SIGTERM)
        result = {}

        def finish():
            try:
                chunks.extend(stream)
                result["ok"] = True
            except MnemoError as error:
                result["error"] = error

        reader = threading.Thread(target=finish)
        reader.start()
        reader.join(timeout=60)
        self.assertFalse(reader.is_alive(), "stream did not finish after SIGTERM")
        self.assertNotIn("error", result, "in-flight stream failed during drain")
        self.assertEqual(stream.finish_reason, "LENGTH")
        self.assertEqual(sum(len(c.tokens) for c in chunks), 200)
        try:
            code = self.server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail(f"mnemo-server still running 60 s after SIGTERM:\n"
                      f"{self.server.log_tail()}")
        self.assertEqual(code, 0, self.server.log_tail())


if __name__ == "__main__":
    unittest.main()
