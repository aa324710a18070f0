#!/usr/bin/python3
"""Three replicas behind nginx share one --session_dir; one is killed -9 mid-traffic.

The replicas are real mnemo-server processes on loopback, the router a real nginx (Debian's
nginx-light) with the consistent hash on `x-mnemo-session` that deploy/nginx/mnemo.conf uses.
50 sessions are created through the router; client threads feed them (Score with
update_memory, greedy Generate) and after every acknowledged call record tokens_seen and the
log-probs of a probe. One replica is killed with SIGKILL mid-traffic; its sessions continue on
the replicas the ring now points at, loaded from the shared directory once the dead process's
locks are gone. Traffic goes on for a while, then stops cleanly, and every session is checked:
tokens_seen at least what its last acknowledged call reported, and the probe equal bit for bit
to the one recorded after that call (so no call ever saw another session's, or a stale,
state).

Run by CTest with Debian's /usr/bin/python3 (MNEMO_SERVER, MNEMO_MODEL_TOOL from the
environment or build/); skipped when nginx is not installed (scripts/setup.sh installs it).
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

NGINX = "/usr/sbin/nginx"
REPLICAS = 3
SESSIONS = 50
THREADS = 10
BEFORE_KILL_S = 5.0
AFTER_KILL_S = 8.0
PROBE = "A probe: the same text, scored without changing the session."
WORDS = "ring hash replica lock snapshot router session delta memory token".split()
# What a call may meet while its replica dies and the router moves on: retried.
RETRIED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
           grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}

NGINX_CONF = """
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream mnemo {{
        hash $http_x_mnemo_session consistent;
{servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            grpc_pass grpc://mnemo;
            grpc_next_upstream error timeout;
            grpc_connect_timeout 2s;
            grpc_read_timeout 120s;
        }}
    }}
}}
"""


class Record:
    def __init__(self, sid):
        self.sid = sid
        self.acked = 0
        self.probe_tokens = -1
        self.probe = None
        self.calls = 0


def _call_with_retry(fn, deadline_s=60.0):
    """Retries what a dying replica leaves behind (the router moves the session on)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            return fn()
        except MnemoError as error:
            if error.code not in RETRIED or time.monotonic() > end:
                raise
            time.sleep(0.2)


@unittest.skipUnless(os.path.exists(NGINX), "nginx is not installed (scripts/setup.sh)")
class ReplicaFailoverTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="mnemo-replicas-")
        self.addCleanup(shutil.rmtree, self.workdir, ignore_errors=True)
        session_dir = os.path.join(self.workdir, "sessions")
        model_writer = harness.ServerProcess(self.workdir)
        model_writer.write_model()
        self.replicas = []
        for i in range(REPLICAS):
            home = os.path.join(self.workdir, f"replica-{i}")
            os.makedirs(home)
            server = harness.ServerProcess(home, ["--session_dir", session_dir])
            server.model_dir = model_writer.model_dir
            self.addCleanup(server.stop)
            server.start()
            self.replicas.append(server)
        for server in self.replicas:
            with Client(server.address, timeout=60) as c:
                server.wait_serving(c)
        self.router_port = harness.free_port()
        servers = "\n".join(f"        server {s.address} max_fails=1 fail_timeout=30s;"
                            for s in self.replicas)
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.workdir, sub))
        conf = os.path.join(self.workdir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=self.workdir, servers=servers, port=self.router_port))
        self.nginx = subprocess.Popen([NGINX, "-p", self.workdir, "-c", conf],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                      preexec_fn=harness.die_with_parent)
        self.addCleanup(self._stop_nginx)
        self.router = f"127.0.0.1:{self.router_port}"
        with Client(self.router, timeout=5) as c:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if c.health(timeout=1.0) == "SERVING":
                        break
                except MnemoError:
                    pass
                self.assertLess(time.monotonic(), deadline, "nginx did not start")
                time.sleep(0.1)

    def _stop_nginx(self):
        if self.nginx.poll() is None:
            self.nginx.kill()
            self.nginx.wait(timeout=30)

    def _traffic(self, records, stop, seed, errors):
        rng = random.Random(seed)
        client = Client(self.router, timeout=60)
        try:
            while not stop.is_set():
                r = rng.choice(records)
                if rng.random() < 0.6:
                    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 20))) + ". "
                    _call_with_retry(lambda: client.score(text, session_id=r.sid,
                                                          update_memory=True))
                    tokens = _call_with_retry(lambda: client.get_session(r.sid)).tokens_seen
                else:
                    prompt = rng.choice(WORDS) + " "
                    n = rng.randint(1, 8)

                    def generate():
                        last = None
                        for chunk in client.generate(prompt, session_id=r.sid,
                                                     max_new_tokens=n, temperature=0):
                            last = chunk
                        return last
                    last = _call_with_retry(generate)
                    if last is None or last.finish_reason not in ("LENGTH", "STOP", "EOS"):
                        errors.append(f"{r.sid}: generate ended {last}")
                        continue
                    tokens = last.usage.session_tokens
                r.acked = tokens
                r.calls += 1
                probe = _call_with_retry(
                    lambda: client.score(PROBE, session_id=r.sid, token_logprobs=True))
                r.probe_tokens, r.probe = tokens, probe.logprobs
        except Exception as error:  # noqa: BLE001 (reported by the test)
            errors.append(repr(error))
        finally:
            client.close()

    def test_kill_one_replica_mid_traffic(self):
        with Client(self.router, timeout=60) as c:
            sids = [f"s{i:02d}" for i in range(SESSIONS)]
            for sid in sids:
                c.create_session(sid)
        records = [Record(sid) for sid in sids]
        # Each thread owns its sessions: calls on one session never overlap.
        shares = [records[i::THREADS] for i in range(THREADS)]
        stop, errors = threading.Event(), []
        threads = [threading.Thread(target=self._traffic, args=(share, stop, i, errors))
                   for i, share in enumerate(shares)]
        for t in threads:
            t.start()
        time.sleep(BEFORE_KILL_S)
        victim = self.replicas[1]
        victim.proc.kill()  # SIGKILL
        victim.proc.wait(timeout=30)
        calls_at_kill = sum(r.calls for r in records)
        time.sleep(AFTER_KILL_S)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        calls_after = sum(r.calls for r in records) - calls_at_kill
        self.assertGreater(calls_after, THREADS, "traffic did not go on after the kill")

        with Client(self.router, timeout=60) as c:
            compared = 0
            for r in records:
                info = c.get_session(r.sid)
                self.assertGreaterEqual(info.tokens_seen, r.acked, r.sid)
                if r.probe is not None and info.tokens_seen == r.probe_tokens:
                    probe = c.score(PROBE, session_id=r.sid, token_logprobs=True).logprobs
                    self.assertEqual(probe, r.probe, f"{r.sid}: probe differs")
                    compared += 1
        # Traffic stopped cleanly (after each thread's probe), so every session compares.
        self.assertEqual(compared, sum(1 for r in records if r.probe is not None))
        print(f"\n[replicas] {calls_at_kill} calls before the kill, {calls_after} after; "
              f"{compared}/{SESSIONS} sessions compared bit for bit", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
