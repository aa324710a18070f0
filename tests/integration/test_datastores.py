#!/usr/bin/python3
"""kNN-LM serving end to end: mnemo-index, mnemo-server --datastore and the Python client.

Writes a tiny random model (server_harness.py), builds a shared datastore from a tiny corpus
with the real mnemo-index, serves it under two names (built-in defaults, and defaults set in
the flag), and checks through mnemo_client: ListDatastores/GetDatastore, Score with and without
knn_lm, a session's private datastore recalling added text under greedy decoding, the error
codes of every knn_lm and Datastores mistake, and the /metrics series. A second class checks
that start-up refuses a datastore built for another model, or a malformed --datastore.

Run by CTest with Debian's /usr/bin/python3. Binaries come from the environment (set by
tests/integration/CMakeLists.txt) or from build/: MNEMO_SERVER, MNEMO_MODEL_TOOL, MNEMO_INDEX.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import grpc  # noqa: E402

import server_harness as harness  # noqa: E402
from mnemo_client import Client, KnnLm, MnemoError  # noqa: E402
from mnemo_client import _stubs  # noqa: E402

INDEX = os.environ.get("MNEMO_INDEX", os.path.join(harness.BUILD, "tools", "mnemo-index"))

# The corpus: three small "documents" of distinct text. Its byte count is the datastore's
# entry count (mnemo-index makes one entry per byte).
CORPUS = {
    "alpha.txt": ("The lighthouse keeper wrote every night in a green ledger: wind from the "
                  "north-east, seven ships, one whale, no lamp oil left for Thursday.\n"),
    "beta.txt": ("def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        "
                 "a, b = b, a + b\n    return a\n"),
    "gamma/notes.md": ("Quartz clocks drift about fifteen seconds a month; the station "
                       "resets them from the radio signal at 03:00 UTC.\n"),
}
CORPUS_BYTES = sum(len(text.encode()) for text in CORPUS.values())

# Text added to a session's private datastore and recalled after PREFIX.
DOCUMENT = "Mnemo remembers: the vault code is 7-4-1-9, ask Ingrid."
PREFIX = "Mnemo remembers: "
# A session datastore limit that one DOCUMENT fits in and a second does not.
SESSION_LIMIT = 80

SHARED = "corpus"   # built-in defaults
TUNED = "corpus2"   # same directory, defaults from the flag
TUNED_DEFAULTS = {"lambda": 0.5, "k": 4, "temperature": 2.0}


def _check_binaries(*paths):
    for path in paths:
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"missing binary {path} (build with scripts/build.sh)")


def _write_model(model_dir, seed):
    subprocess.run(
        [harness.MODEL_TOOL, "init", "--out", model_dir, "--layers", "2", "--d_model", "64",
         "--heads", "2", "--seg_len", "16", "--mem_len", "32", "--cmem_len", "8",
         "--seed", str(seed)],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)


def _write_corpus(root):
    for name, text in CORPUS.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def _build_datastore(model_dir, corpus_dir, out_dir):
    """Runs mnemo-index; returns the manifest it wrote."""
    result = subprocess.run(
        [INDEX, "--model", model_dir, "--corpus", corpus_dir, "--out", out_dir, "--split", "all",
         "--threads", "1"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"mnemo-index failed ({result.returncode}):\n"
                           f"{result.stdout.decode(errors='replace')}"
                           f"{result.stderr.decode(errors='replace')}")
    with open(os.path.join(out_dir, "manifest.json")) as f:
        return json.load(f)


def _scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def _sample(body, name, labels=""):
    """The value of one Prometheus sample, e.g. _sample(body, "x_count") or with '{a="b"}'."""
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.MULTILINE)
    return None if match is None else float(match.group(1))


class _Fixture:
    """Built once per run (setUpModule): the corpus, the served model and its datastore, and
    another model (same shape and name, other weights) with a datastore of its own."""
    workdir = ""
    corpus_dir = ""
    model_dir = ""        # the served model (what harness.ServerProcess would write)
    datastore_dir = ""
    manifest = {}
    other_datastore_dir = ""
    other_manifest = {}


def setUpModule():
    _check_binaries(harness.SERVER, harness.MODEL_TOOL, INDEX)
    f = _Fixture
    f.workdir = tempfile.mkdtemp(prefix="mnemo-datastores-")
    unittest.addModuleCleanup(shutil.rmtree, f.workdir, ignore_errors=True)
    f.corpus_dir = os.path.join(f.workdir, "corpus")
    _write_corpus(f.corpus_dir)
    f.model_dir = os.path.join(f.workdir, "model")
    _write_model(f.model_dir, seed=1)
    f.datastore_dir = os.path.join(f.workdir, "datastore")
    f.manifest = _build_datastore(f.model_dir, f.corpus_dir, f.datastore_dir)
    other_model = os.path.join(f.workdir, "other-model")
    _write_model(other_model, seed=2)
    f.other_datastore_dir = os.path.join(f.workdir, "other-datastore")
    f.other_manifest = _build_datastore(other_model, f.corpus_dir, f.other_datastore_dir)


class DatastoresTest(unittest.TestCase):
    """One server with the corpus datastore under two names; each test uses its own sessions."""

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="mnemo-datastores-server-")
        cls.addClassCleanup(shutil.rmtree, cls.workdir, ignore_errors=True)
        cls.datastore_dir = _Fixture.datastore_dir
        cls.manifest = _Fixture.manifest
        tuned = ",".join(f"{key}={value}" for key, value in TUNED_DEFAULTS.items())
        server = harness.ServerProcess(cls.workdir, extra_args=[
            "--datastore", f"{SHARED}={cls.datastore_dir}",
            f"--datastore={TUNED}={cls.datastore_dir},{tuned},nprobe=1",
            "--max_session_datastore_entries", str(SESSION_LIMIT)])
        server.model_dir = _Fixture.model_dir
        cls.addClassCleanup(server.stop)
        server.start()
        cls.server = server
        cls.client = Client(server.address, timeout=60)
        cls.addClassCleanup(cls.client.close)
        server.wait_serving(cls.client)

    def new_session(self):
        sid = self.client.create_session().session_id
        self.addCleanup(self._delete_quietly, sid)
        return sid

    def _delete_quietly(self, sid):
        try:
            self.client.delete_session(sid)
        except MnemoError:
            pass

    def assert_code(self, code, call, *fragments):
        with self.assertRaises(MnemoError) as caught:
            call()
        self.assertEqual(caught.exception.code, code, caught.exception.message)
        for fragment in fragments:
            self.assertIn(fragment, caught.exception.message)
        return caught.exception

    # --- the index and the listing --------------------------------------------------------------

    def test_index_made_one_entry_per_corpus_byte(self):
        self.assertEqual(self.manifest["entries"], CORPUS_BYTES)
        self.assertEqual(self.manifest["corpus"]["files"], len(CORPUS))

    def test_list_datastores(self):
        datastores = self.client.list_datastores()
        self.assertEqual([d.name for d in datastores], [SHARED, TUNED])  # sorted by name
        for d in datastores:
            self.assertEqual(d.entries, CORPUS_BYTES)
            self.assertEqual(d.model, self.manifest["model_id"])
            self.assertEqual(d.dimension, 64)
            self.assertEqual(d.index_type, "flat")
            self.assertEqual(d.corpus_files, len(CORPUS))
            self.assertEqual(d.corpus_bytes, CORPUS_BYTES)
            self.assertEqual(d.session_id, "")
            self.assertGreater(d.bytes, 0)
            self.assertTrue(d.built_at)

    def test_list_datastores_paginates(self):
        stub = _stubs.datastores_pb2_grpc.DatastoresStub(self.client._channel)
        first = stub.ListDatastores(_stubs.datastores_pb2.ListDatastoresRequest(page_size=1),
                                    timeout=30)
        self.assertEqual([d.name for d in first.datastores], [SHARED])
        self.assertTrue(first.next_page_token)
        second = stub.ListDatastores(_stubs.datastores_pb2.ListDatastoresRequest(
            page_size=1, page_token=first.next_page_token), timeout=30)
        self.assertEqual([d.name for d in second.datastores], [TUNED])
        self.assertEqual(second.next_page_token, "")

    def test_get_datastore_reports_defaults(self):
        shared = self.client.get_datastore(SHARED)
        self.assertEqual(shared.dir, self.datastore_dir)
        self.assertAlmostEqual(shared.default_lambda, 0.25)
        self.assertEqual(shared.default_k, 16)
        self.assertAlmostEqual(shared.default_temperature, 1.0)
        tuned = self.client.get_datastore(TUNED)
        self.assertAlmostEqual(tuned.default_lambda, TUNED_DEFAULTS["lambda"])
        self.assertEqual(tuned.default_k, TUNED_DEFAULTS["k"])
        self.assertAlmostEqual(tuned.default_temperature, TUNED_DEFAULTS["temperature"])

    # --- Score ----------------------------------------------------------------------------------

    def test_knn_lm_lowers_bits_per_byte_on_corpus_text(self):
        text = CORPUS["alpha.txt"]
        plain = self.client.score(text)
        knn = self.client.score(text, knn_lm=KnnLm(SHARED))
        self.assertEqual(knn.token_count, plain.token_count)
        # A random model is near 8 bits per byte. Every position of a corpus file has its own
        # entry, so the neighbours carry the right byte; with the defaults (lambda 0.25, k 16,
        # temperature 1) close neighbours share p_kNN, and the mixture still saves most bits.
        self.assertGreater(plain.bits_per_byte, 6.0)
        self.assertLess(knn.bits_per_byte, plain.bits_per_byte / 2)

    def test_nearest_key_of_corpus_text_is_its_own_entry(self):
        # Score reads a text the way mnemo-index reads a file (fresh memory, BOS first), so
        # each position's key is in the datastore (up to float16 rounding): with k 1 and
        # lambda 1 every byte of a corpus file gets probability 1. All but the first: every
        # file's first key (BOS alone) is the same, so the nearest one may be another file's.
        text = CORPUS["beta.txt"]
        exact = self.client.score(text, token_logprobs=True,
                                  knn_lm=KnnLm(SHARED, lambda_=1.0, k=1))
        self.assertEqual(len(exact.logprobs), len(text.encode()))
        for i, logprob in enumerate(exact.logprobs[1:], start=1):
            self.assertGreater(logprob, -1e-3, f"byte {i} of {text!r}")

    def test_lambda_zero_is_the_model_alone(self):
        text = CORPUS["beta.txt"]
        plain = self.client.score(text, token_logprobs=True)
        knn = self.client.score(text, token_logprobs=True,
                                knn_lm={"datastore": SHARED, "lambda": 0.0})
        self.assertAlmostEqual(knn.total_logprob, plain.total_logprob, delta=1e-3)
        for a, b in zip(knn.logprobs, plain.logprobs):
            self.assertAlmostEqual(a, b, delta=1e-4)

    def test_unset_fields_take_the_datastores_defaults(self):
        text = CORPUS["gamma/notes.md"]
        by_default = self.client.score(text, knn_lm=KnnLm(TUNED))
        explicit = self.client.score(text, knn_lm=KnnLm(
            SHARED, lambda_=TUNED_DEFAULTS["lambda"], k=TUNED_DEFAULTS["k"],
            temperature=TUNED_DEFAULTS["temperature"]))
        self.assertAlmostEqual(by_default.total_logprob, explicit.total_logprob, delta=1e-3)
        shared_defaults = self.client.score(text, knn_lm=KnnLm(SHARED))
        self.assertNotAlmostEqual(by_default.total_logprob, shared_defaults.total_logprob,
                                  delta=1e-2)

    def test_lambda_one_gives_unseen_bytes_no_probability(self):
        # 'Z' and '!' never occur in the corpus: with lambda 1 only p_kNN counts, so a text
        # ending in a byte no neighbour has scores -inf (reported as such, not as NaN).
        result = self.client.score("Z!", token_logprobs=True,
                                   knn_lm=KnnLm(SHARED, lambda_=1.0, k=4))
        self.assertTrue(math.isinf(result.logprobs[-1]) and result.logprobs[-1] < 0,
                        result.logprobs)

    # --- a session's private datastore ---------------------------------------------------------

    def test_session_datastore_recalls_added_text(self):
        sid = self.new_session()
        empty = self.client.get_datastore("session", sid)
        self.assertEqual((empty.name, empty.session_id, empty.entries), ("session", sid, 0))
        self.assertEqual(empty.index_type, "exact")

        added = self.client.add_to_session_datastore(sid, DOCUMENT)
        self.assertEqual(added.entries_added, len(DOCUMENT.encode()))
        self.assertEqual(added.datastore.entries, len(DOCUMENT.encode()))
        self.assertEqual(added.datastore.session_id, sid)
        self.assertEqual(added.datastore.model, self.manifest["model_id"])
        self.assertEqual(self.client.get_datastore("session", sid).entries,
                         len(DOCUMENT.encode()))
        # Adding reads the text with a fresh memory: the session's own memory is untouched.
        self.assertEqual(self.client.get_session(sid).tokens_seen, 0)

        rest = DOCUMENT[len(PREFIX):]
        recalled = self.client.generate(
            PREFIX, session_id=sid, max_new_tokens=len(rest), temperature=0,
            stop_at_eos=False, knn_lm={"datastore": "session", "lambda": 1.0, "k": 1}).text()
        self.assertEqual(recalled, rest)

        # Without kNN-LM the same greedy decode from the same state does not know the text.
        other = self.new_session()
        plain = self.client.generate(PREFIX, session_id=other, max_new_tokens=len(rest),
                                     temperature=0, stop_at_eos=False).text()
        self.assertNotEqual(plain, rest)

    def test_session_datastore_limit_adds_nothing_beyond_it(self):
        sid = self.new_session()
        self.client.add_to_session_datastore(sid, DOCUMENT)
        self.assert_code(grpc.StatusCode.RESOURCE_EXHAUSTED,
                         lambda: self.client.add_to_session_datastore(sid, DOCUMENT))
        self.assertEqual(self.client.get_datastore("session", sid).entries,
                         len(DOCUMENT.encode()))

    def test_session_datastores_are_private(self):
        owner = self.new_session()
        self.client.add_to_session_datastore(owner, DOCUMENT)
        other = self.new_session()
        self.assertEqual(self.client.get_datastore("session", other).entries, 0)
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION,
                         lambda: self.client.score(DOCUMENT, session_id=other,
                                                   knn_lm=KnnLm("session")),
                         other)

    # --- errors ---------------------------------------------------------------------------------

    def test_unknown_datastore_is_not_found_listing_the_loaded_ones(self):
        for call in (lambda: self.client.score("x", knn_lm=KnnLm("nope")),
                     lambda: self.client.generate("x", max_new_tokens=2,
                                                  knn_lm=KnnLm("nope")).text(),
                     lambda: self.client.get_datastore("nope")):
            self.assert_code(grpc.StatusCode.NOT_FOUND, call, "nope", SHARED, TUNED)

    def test_session_datastore_needs_a_session_id(self):
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.score("x", knn_lm=KnnLm("session")), "session_id")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.generate("x", max_new_tokens=2,
                                                      knn_lm=KnnLm("session")).text(),
                         "session_id")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.get_datastore("session"), "session_id")

    def test_session_without_a_private_datastore_is_failed_precondition(self):
        sid = self.new_session()
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION,
                         lambda: self.client.score("abc", session_id=sid,
                                                   knn_lm=KnnLm("session")),
                         "AddToSessionDatastore")
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION,
                         lambda: self.client.generate("abc", session_id=sid, max_new_tokens=3,
                                                      knn_lm=KnnLm("session")).text(),
                         "AddToSessionDatastore")
        # Refused before any model work: the prompt did not enter the session's memory.
        self.assertEqual(self.client.get_session(sid).tokens_seen, 0)

    def test_out_of_range_parameters_name_the_field(self):
        cases = [
            (KnnLm(SHARED, lambda_=1.5), "knn_lm.lambda"),
            (KnnLm(SHARED, lambda_=-0.1), "knn_lm.lambda"),
            (KnnLm(SHARED, k=-1), "knn_lm.k"),
            (KnnLm(SHARED, k=1025), "knn_lm.k"),
            (KnnLm(SHARED, temperature=0.0), "knn_lm.temperature"),
            (KnnLm(SHARED, temperature=-1.0), "knn_lm.temperature"),
            (KnnLm("", lambda_=0.5), "knn_lm.datastore"),
            (KnnLm("", k=4), "knn_lm.datastore"),
            (KnnLm("", temperature=1.0), "knn_lm.datastore"),
        ]
        for knn_lm, field in cases:
            with self.subTest(knn_lm=knn_lm):
                self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                                 lambda: self.client.score("abc", knn_lm=knn_lm), field)
                self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                                 lambda: self.client.generate("abc", max_new_tokens=2,
                                                              knn_lm=knn_lm).text(), field)

    def test_add_to_session_datastore_errors(self):
        self.assert_code(grpc.StatusCode.NOT_FOUND,
                         lambda: self.client.add_to_session_datastore("no-such-session", "abc"))
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.add_to_session_datastore("", "abc"), "session_id")
        sid = self.new_session()
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.client.add_to_session_datastore(sid, ""), "text")
        self.assert_code(grpc.StatusCode.NOT_FOUND,
                         lambda: self.client.get_datastore("session", "no-such-session"))

    # --- metrics --------------------------------------------------------------------------------

    def test_metrics(self):
        sid = self.new_session()
        self.client.add_to_session_datastore(sid, DOCUMENT)
        self.client.score(CORPUS["alpha.txt"], knn_lm=KnnLm(SHARED))
        body = _scrape(self.server.metrics_port)
        self.assertGreater(_sample(body, "mnemo_knn_search_seconds_count") or 0, 0, body)
        for name in (SHARED, TUNED):
            labels = f'{{datastore="{name}"}}'
            self.assertEqual(_sample(body, "mnemo_datastore_entries", labels), CORPUS_BYTES)
            self.assertGreater(_sample(body, "mnemo_datastore_bytes", labels) or 0, 0)
        # The sessions' sum is refreshed by the engine's stats; poll briefly for it.
        deadline = time.monotonic() + 10
        session_entries = None
        while time.monotonic() < deadline:
            session_entries = _sample(_scrape(self.server.metrics_port),
                                      "mnemo_datastore_entries", '{datastore="session"}')
            if session_entries is not None and session_entries >= len(DOCUMENT.encode()):
                break
            time.sleep(0.2)
        self.assertGreaterEqual(session_entries or 0, len(DOCUMENT.encode()))


class DatastoreStartupTest(unittest.TestCase):
    """mnemo-server refuses to start with a datastore it cannot serve."""

    def run_server(self, *args):
        """Runs mnemo-server expecting it to exit by itself; returns (exit code, output)."""
        result = subprocess.run(
            [harness.SERVER, "--model", _Fixture.model_dir,
             "--listen", f"127.0.0.1:{harness.free_port()}", "--metrics_listen=", "--threads", "1"]
            + list(args),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=120, preexec_fn=harness.die_with_parent)
        return result.returncode, result.stdout.decode(errors="replace")

    def test_datastore_of_another_model_is_refused(self):
        served_id = _Fixture.manifest["model_id"]
        other_id = _Fixture.other_manifest["model_id"]
        self.assertNotEqual(served_id, other_id)
        code, output = self.run_server("--datastore", f"other={_Fixture.other_datastore_dir}")
        self.assertNotEqual(code, 0, output)
        self.assertIn(served_id, output)
        self.assertIn(other_id, output)

    def test_malformed_datastore_flags_are_refused(self):
        # ParseDatastoreSpec's cases are unit-tested; these check that main's handling of the
        # flag (';' splits values, repeated flags add up) reaches start-up and its exit code.
        own = _Fixture.datastore_dir
        for value, fragment in ((f"session={own}", "reserved"),
                                (f"a={own};a={own}", "twice")):
            with self.subTest(value=value):
                code, output = self.run_server(f"--datastore={value}")
                self.assertNotEqual(code, 0, output)
                self.assertIn(fragment, output)


if __name__ == "__main__":
    unittest.main()
