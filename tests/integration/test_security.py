#!/usr/bin/python3
"""TLS, mutual TLS, API keys and the request log with the real binaries (docs/security.md).

Certificates are made at test time with openssl (a test CA, a server certificate for
localhost / 127.0.0.1, a client certificate, and a rogue CA's client certificate). One
mnemo-server runs with --tls_cert/--tls_key/--tls_client_ca, --auth_keys (two tenants) and
--log_format json; the Python client, the `mnemo` CLI and mnemo-bench connect to it. A second,
plaintext server checks --reflection=false.

Run by CTest with Debian's /usr/bin/python3 (MNEMO_SERVER, MNEMO_MODEL_TOOL, MNEMO_CLI,
MNEMO_BENCH from the environment or build/).
"""

import hashlib
import json
import os
import signal
import ssl
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
from mnemo_client import Client, MnemoError  # noqa: E402
from mnemo_client import _stubs  # noqa: E402

BENCH = os.environ.get("MNEMO_BENCH", os.path.join(harness.BUILD, "clients", "cpp", "mnemo-bench"))
KEY_A = "team-a-secret-key-1"
KEY_B = "team-b-secret-key-2"
SECRET_PROMPT = "zebra-quartz secret prompt text"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, timeout=60)


def _make_certs(d: str) -> None:
    """ca.pem/ca.key, server.pem/key (localhost, 127.0.0.1), client.pem/key (signed by ca),
    rogue-client.pem/key (signed by another CA)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN=mnemo test {ca}", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, ca, ext in (("server", "ca", ["-extfile", "server.ext"]),
                          ("client", "ca", []), ("rogue-client", "rogue-ca", [])):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *ext, cwd=d)


def _write_keys(path: str, tenants) -> None:
    doc = {"tenants": [{"name": name, "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
                        **limits} for name, key, limits in tenants]}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


class SecureServerTest(unittest.TestCase):
    """One server with mutual TLS, API keys and a JSON request log."""

    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.mkdtemp(prefix="mnemo-certs-")
        cls.addClassCleanup(subprocess.run, ["rm", "-rf", cls.certs])
        _make_certs(cls.certs)
        cls.keys = os.path.join(cls.certs, "keys.json")
        _write_keys(cls.keys, [("team-a", KEY_A, {}), ("team-b", KEY_B, {"max_concurrent": 4})])
        c = cls.cert
        workdir = tempfile.mkdtemp(prefix="mnemo-security-")
        cls.addClassCleanup(subprocess.run, ["rm", "-rf", workdir])
        cls.server = harness.ServerProcess(workdir, [
            "--tls_cert", c("server.pem"), "--tls_key", c("server.key"),
            "--tls_client_ca", c("ca.pem"), "--auth_keys", cls.keys, "--log_format", "json",
            "--metrics_tls"])
        cls.addClassCleanup(cls.server.stop)
        cls.server.start()
        probe = cls.client(api_key=None)
        cls.addClassCleanup(probe.close)
        cls.server.wait_serving(probe)  # health needs no key

    @classmethod
    def cert(cls, name: str) -> str:
        return os.path.join(cls.certs, name)

    @classmethod
    def client(cls, api_key=KEY_A, **tls) -> Client:
        options = dict(tls_ca=cls.cert("ca.pem"), tls_cert=cls.cert("client.pem"),
                       tls_key=cls.cert("client.key"))
        options.update(tls)
        return Client(cls.server.address, timeout=30, api_key=api_key or "", **options)

    def setUp(self):
        self.assertIsNone(self.server.proc.poll(), f"mnemo-server died:\n{self.server.log_tail()}")

    def assertCode(self, fn, code: grpc.StatusCode):
        with self.assertRaises(MnemoError) as caught:
            fn()
        self.assertEqual(caught.exception.code, code, str(caught.exception))
        return caught.exception

    def test_plaintext_and_unverified_clients_cannot_connect(self):
        plain = Client(self.server.address, timeout=5, api_key=KEY_A)
        self.addCleanup(plain.close)
        self.assertCode(lambda: plain.models(), grpc.StatusCode.UNAVAILABLE)
        for tls in ({"tls_cert": None, "tls_key": None},  # no client certificate
                    {"tls_cert": self.cert("rogue-client.pem"),
                     "tls_key": self.cert("rogue-client.key")},  # signed by another CA
                    {"tls_ca": self.cert("rogue-ca.pem")}):  # does not trust the server
            c = Client(self.server.address, timeout=5, api_key=KEY_A,
                       **{"tls_ca": self.cert("ca.pem"), "tls_cert": self.cert("client.pem"),
                          "tls_key": self.cert("client.key"), **tls})
            self.addCleanup(c.close)
            self.assertCode(lambda: c.models(), grpc.StatusCode.UNAVAILABLE)

    def test_keys_and_tenant_isolation_over_mutual_tls(self):
        a, b, anonymous = self.client(KEY_A), self.client(KEY_B), self.client(api_key=None)
        for c in (a, b, anonymous):
            self.addCleanup(c.close)
        self.assertCode(lambda: anonymous.list_sessions(), grpc.StatusCode.UNAUTHENTICATED)
        wrong = self.client("not-a-key")
        self.addCleanup(wrong.close)
        self.assertCode(lambda: wrong.create_session(), grpc.StatusCode.UNAUTHENTICATED)

        sid = a.create_session("tls-doc").session_id
        self.assertEqual(sid, "tls-doc")
        text = a.generate(SECRET_PROMPT, session_id=sid, max_new_tokens=6, temperature=0).text()
        self.assertTrue(text)
        error = self.assertCode(lambda: b.get_session(sid), grpc.StatusCode.NOT_FOUND)
        self.assertNotIn("team-a", str(error))
        self.assertCode(lambda: b.generate("x", session_id=sid, max_new_tokens=2).text(),
                        grpc.StatusCode.NOT_FOUND)
        self.assertCode(lambda: b.delete_session(sid), grpc.StatusCode.NOT_FOUND)
        self.assertNotIn(sid, [s.session_id for s in b.list_sessions()])
        self.assertIn(sid, [s.session_id for s in a.list_sessions()])
        self.assertEqual(a.get_session(sid).session_id, sid)

    def test_request_log_is_json_and_never_holds_prompts(self):
        a, anonymous = self.client(KEY_A), self.client(api_key=None)
        self.addCleanup(a.close)
        self.addCleanup(anonymous.close)
        self.assertCode(lambda: anonymous.list_sessions(), grpc.StatusCode.UNAUTHENTICATED)
        sid = a.create_session().session_id
        self.assertEqual(len(sid), 32)
        a.generate(SECRET_PROMPT, session_id=sid, max_new_tokens=5, temperature=0).text()
        deadline = time.monotonic() + 10
        found = None
        while time.monotonic() < deadline and found is None:
            with open(self.server.log_path, "rb") as f:
                log = f.read().decode("utf-8", "replace")
            records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
            for r in records:
                if r["method"] == "Generate" and r.get("session") == sid:
                    found = r
            time.sleep(0.1)
        self.assertIsNotNone(found, log[-2000:])
        self.assertEqual(found["tenant"], "team-a")
        self.assertEqual(found["code"], "OK")
        self.assertEqual(found["tokens_out"], 5)
        self.assertGreater(found["tokens_in"], 0)
        self.assertIn("queue_ms", found)
        self.assertGreater(found["total_ms"], 0)
        self.assertIn("time", found)
        self.assertNotIn(SECRET_PROMPT, log)
        self.assertNotIn(KEY_A, log)
        # Refused calls are logged with their code (and no tenant).
        refused = [r for r in records if r["code"] == "UNAUTHENTICATED"]
        self.assertTrue(refused, "no UNAUTHENTICATED line")
        self.assertNotIn("tenant", refused[0])

    def test_cli_over_mutual_tls_with_key_from_the_environment(self):
        args = [harness.CLI, "--address", self.server.address, "--tls_ca", self.cert("ca.pem"),
                "--tls_cert", self.cert("client.pem"), "--tls_key", self.cert("client.key")]
        env = dict(os.environ, MNEMO_API_KEY=KEY_B)
        made = subprocess.run(args + ["--id", "cli-tls", "session", "create"], env=env,
                              capture_output=True, timeout=60)
        self.assertEqual(made.returncode, 0, made.stderr)
        out = subprocess.run(args + ["--session", "cli-tls", "--max_new_tokens", "4",
                                     "generate", "hello"], env=env, capture_output=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"generated_tokens=4", out.stderr)
        env.pop("MNEMO_API_KEY")
        refused = subprocess.run(args + ["session", "get", "cli-tls"], env=env,
                                 capture_output=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(b"UNAUTHENTICATED", refused.stderr)
        key_file = os.path.join(self.certs, "b.key.txt")
        with open(key_file, "w") as f:
            f.write(KEY_B + "\n")
        got = subprocess.run(args + ["--api_key_file", key_file, "session", "get", "cli-tls"],
                             env=env, capture_output=True, timeout=60)
        self.assertEqual(got.returncode, 0, got.stderr)
        self.assertIn(b"cli-tls", got.stdout + got.stderr)

    def test_metrics_over_https_with_tenant_series(self):
        a = self.client(KEY_A)
        self.addCleanup(a.close)
        a.tokenize("count me")
        url = f"https://localhost:{self.server.metrics_port}/metrics"
        context = ssl.create_default_context(cafile=self.cert("ca.pem"))
        with urllib.request.urlopen(url, context=context, timeout=10) as response:
            body = response.read().decode()
        self.assertIn('mnemo_tenant_requests_total{code="OK",tenant="team-a"}', body)
        self.assertIn('mnemo_tenant_tokens_total{direction="in",tenant="team-b"}', body)
        with self.assertRaises(Exception):  # plain http to the https port gets no answer
            urllib.request.urlopen(f"http://127.0.0.1:{self.server.metrics_port}/metrics",
                                   timeout=10).read()

    @unittest.skipUnless(os.access(BENCH, os.X_OK), "mnemo-bench not built")
    def test_bench_over_mutual_tls(self):
        out = subprocess.run(
            [BENCH, "--target", self.server.address, "--tls_ca", self.cert("ca.pem"),
             "--tls_cert", self.cert("client.pem"), "--tls_key", self.cert("client.key"),
             "--concurrency", "2", "--requests", "2", "--warmup", "0", "--prompt_tokens", "8",
             "--max_new_tokens", "4", "--progress=false"],
            env=dict(os.environ, MNEMO_API_KEY=KEY_A), capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


class ReloadTest(unittest.TestCase):
    """SIGHUP reloads --auth_keys without dropping streams; a bad file keeps the old keys."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="mnemo-reload-")
        cls.addClassCleanup(subprocess.run, ["rm", "-rf", cls.dir])
        cls.keys = os.path.join(cls.dir, "keys.json")
        _write_keys(cls.keys, [("team-a", KEY_A, {}), ("team-b", KEY_B, {})])
        cls.server = harness.ServerProcess(cls.dir, ["--auth_keys", cls.keys, "--reflection=false"])
        cls.addClassCleanup(cls.server.stop)
        cls.server.start()
        probe = Client(cls.server.address, timeout=30, api_key="")
        cls.addClassCleanup(probe.close)
        cls.server.wait_serving(probe)

    def wait_for(self, predicate, what: str):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        self.fail(f"timed out waiting for {what}:\n{self.server.log_tail()}")

    def works(self, key: str) -> bool:
        c = Client(self.server.address, timeout=10, api_key=key)
        try:
            c.list_sessions()
            return True
        except MnemoError as error:
            self.assertEqual(error.code, grpc.StatusCode.UNAUTHENTICATED, str(error))
            return False
        finally:
            c.close()

    def test_sighup_rotates_keys_without_dropping_streams(self):
        a = Client(self.server.address, timeout=60, api_key=KEY_A)
        self.addCleanup(a.close)
        sid = a.create_session("kept").session_id
        stream = a.generate("long", session_id=sid, max_new_tokens=1500, stop_at_eos=False)
        first = next(stream)
        rotated = "team-a-rotated-key"
        _write_keys(self.keys, [("team-a", rotated, {}), ("team-b", KEY_B, {})])
        self.server.proc.send_signal(signal.SIGHUP)
        self.wait_for(lambda: self.works(rotated), "the rotated key")
        self.assertFalse(self.works(KEY_A))
        # The stream that began under the old key runs to its end.
        tokens = len(first.tokens) + sum(len(c.tokens) for c in stream)
        self.assertEqual(tokens, 1500)
        self.assertEqual(stream.finish_reason, "LENGTH")
        b = Client(self.server.address, timeout=30, api_key=rotated)
        self.addCleanup(b.close)
        self.assertEqual([s.session_id for s in b.list_sessions()], ["kept"])
        # A broken file keeps the keys in force, and says so.
        with open(self.keys, "w") as f:
            f.write("{ not json")
        self.server.proc.send_signal(signal.SIGHUP)
        self.wait_for(lambda: "keeping the previous API keys" in self.server.log_tail(200),
                      "the reload error")
        self.assertTrue(self.works(rotated))
        self.assertIsNone(self.server.proc.poll())

    def test_reflection_can_be_turned_off_and_health_stays_open(self):
        channel = grpc.insecure_channel(self.server.address)
        self.addCleanup(channel.close)
        stub = _stubs.reflection_pb2_grpc.ServerReflectionStub(channel)
        request = _stubs.reflection_pb2.ServerReflectionRequest(list_services="")
        with self.assertRaises(grpc.RpcError) as caught:
            list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        c = Client(self.server.address, timeout=10, api_key="")
        self.addCleanup(c.close)
        self.assertEqual(c.health(), "SERVING")


if __name__ == "__main__":
    unittest.main()
