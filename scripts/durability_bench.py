#!/usr/bin/python3
"""What durable sessions cost (docs/durability.md): writes docs/results/durability.{md,json}.

On the bundled model, through real servers on loopback:
  1. Decode throughput with --session_dir on vs off: mnemo-bench, 16 streams (and 1) on reused
     sessions, rounds interleaved off/on/off/on on the same machine.
  2. Snapshot and log sizes per session kind: fresh, after 1K tokens, after 70K tokens (the
     kNN memory full: 65,536 entries + window, FAISS IVF search), remembering (recall index of
     1M tokens); log bytes per Generate call.
  3. Restore: the 70K-token session after a kill -9, first call's latency (client) and the
     server's mnemo_session_restore_seconds; every session compared bit for bit (probe).

    /usr/bin/python3 scripts/durability_bench.py --model models/mnemo-stdlib \\
        --build build --out docs/results
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))

from mnemo_client import Client, MnemoError  # noqa: E402

PROBE = "def probe(x):\n    return x * 2  # a probe scored without changing the session\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, session_dir=None, log_dir="."):
        self.port, self.metrics_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        cmd = [os.path.join(args.build, "server", "mnemo-server"), "--model", args.model,
               "--listen", self.address, "--metrics_listen", f"127.0.0.1:{self.metrics_port}",
               "--threads", str(args.threads)]
        if session_dir:
            cmd += ["--session_dir", session_dir]
        self.log = open(os.path.join(log_dir, f"server-{self.port}.log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = Client(self.address, timeout=3600)
        deadline = time.time() + 120
        while True:
            try:
                if self.client.health(timeout=1.0) == "SERVING":
                    break
            except MnemoError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)

    def metrics(self):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read()
        values = {}
        for line in text.decode().splitlines():
            m = re.match(r"^(mnemo_session\w+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if m:
                values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return values

    def kill(self):
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def bench(args, session_dir, streams, tmp):
    server = Server(args, session_dir, tmp)
    out = os.path.join(tmp, f"bench-{streams}-{bool(session_dir)}-{time.time()}.json")
    subprocess.run([os.path.join(args.build, "clients", "cpp", "mnemo-bench"),
                    "--target", server.address, "--concurrency", str(streams),
                    "--duration", f"{args.seconds}s", "--sessions", "reuse",
                    "--prompt_tokens", "128", "--max_new_tokens", "64", "--json", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = server.metrics()
    server.kill()
    with open(out) as f:
        result = json.load(f)
    level = result["levels"][0] if "levels" in result else result["results"][0]
    return level["output_tokens_per_s"], metrics


def file_sizes(session_dir, sid):
    sizes = {}
    for ext in ("snap", "log"):
        path = os.path.join(session_dir, f"{sid}.{ext}")
        sizes[ext] = os.path.getsize(path) if os.path.exists(path) else 0
    return sizes


def text_of(n_bytes):
    """Held-out-style filler: the Python standard library's source, n bytes of it."""
    chunks, total = [], 0
    for root, _, files in os.walk("/usr/lib/python3.11"):
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read().decode("utf-8", "replace")
                chunks.append(data)
                total += len(data.encode())
                if total >= n_bytes:
                    return "".join(chunks).encode()[:n_bytes].decode("utf-8", "ignore")
    return "".join(chunks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(_ROOT, "models", "mnemo-stdlib"))
    parser.add_argument("--build", default=os.path.join(_ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(_ROOT, "docs", "results"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--long_bytes", type=int, default=70000)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="mnemo-durability-bench-")
    report = {"model": args.model, "threads": args.threads, "bench_seconds": args.seconds}

    # 1. Throughput, interleaved.
    runs = {}
    for streams in (16, 1):
        for r in range(args.rounds):
            for on in (False, True):
                sdir = os.path.join(tmp, f"tp-{streams}-{r}") if on else None
                tps, metrics = bench(args, sdir, streams, tmp)
                runs.setdefault(f"{streams}/{'on' if on else 'off'}", []).append(tps)
                if on:
                    runs.setdefault(f"{streams}/log_bytes", []).append(
                        metrics.get("mnemo_session_log_bytes_total", 0))
                print(f"[throughput] {streams} streams, session_dir {'on' if on else 'off'}, "
                      f"round {r + 1}: {tps:.1f} tokens/s", file=sys.stderr, flush=True)
    report["throughput"] = runs

    # 2. + 3. Sizes and restore.
    sdir = os.path.join(tmp, "sessions")
    server = Server(args, sdir, tmp)
    c = server.client
    sizes, probes = {}, {}
    c.create_session("fresh")
    sizes["fresh"] = file_sizes(sdir, "fresh")
    c.create_session("short")
    c.score(text_of(1024), session_id="short", update_memory=True)
    sizes["after 1K tokens"] = file_sizes(sdir, "short")
    before = file_sizes(sdir, "short")["log"]
    last = None
    for chunk in c.generate("x = ", session_id="short", max_new_tokens=64, temperature=0):
        last = chunk
    sizes["log record of one 64-token Generate"] = file_sizes(sdir, "short")["log"] - before
    c.create_session("remembers", remember=True)
    c.score(text_of(1024), session_id="remembers", update_memory=True)
    sizes["remember, after 1K tokens"] = file_sizes(sdir, "remembers")
    c.create_session("long")
    t = time.time()
    c.score(text_of(args.long_bytes), session_id="long", update_memory=True)
    feed_s = time.time() - t
    info = c.get_session("long")
    sizes[f"after {args.long_bytes // 1000}K tokens"] = file_sizes(sdir, "long")
    for sid in ("fresh", "short", "remembers", "long"):
        probes[sid] = c.score(PROBE, session_id=sid, token_logprobs=True).logprobs
    metrics_before = server.metrics()
    server.kill()

    server = Server(args, sdir, tmp)
    t = time.time()
    restored = server.client.get_session("long")
    restore_client_s = time.time() - t
    metrics = server.metrics()
    same = {sid: server.client.score(PROBE, session_id=sid, token_logprobs=True).logprobs
            == probes[sid] for sid in probes}
    server.kill()
    report["sizes"] = sizes
    report["long_session"] = {
        "bytes_fed": args.long_bytes, "feed_seconds": feed_s, "tokens_seen": info.tokens_seen,
        "knn_entries_visible": info.memory.knn_entries, "memory_bytes": info.memory.bytes,
        "restore_first_call_seconds": restore_client_s,
        "restore_server_seconds": metrics.get("mnemo_session_restore_seconds_sum"),
        "restored_tokens_seen": restored.tokens_seen,
    }
    report["snapshot_metrics_before_kill"] = metrics_before
    report["bit_for_bit_after_restart"] = same
    shutil.rmtree(tmp, ignore_errors=True)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "durability.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    print(summary(report))


def summary(report):
    """The tables docs/results/durability.md quotes, in Markdown."""
    lines = ["| streams | --session_dir off (tokens/s) | on (tokens/s) | on / off |",
             "|---|---|---|---|"]
    tp = report["throughput"]
    for streams in ("16", "1"):
        off, on = tp[f"{streams}/off"], tp[f"{streams}/on"]
        lines.append(f"| {streams} | {' / '.join(f'{x:.0f}' for x in off)} | "
                     f"{' / '.join(f'{x:.0f}' for x in on)} | "
                     f"{(sum(on) / len(on)) / (sum(off) / len(off)):.3f} |")
    lines += ["", "| session | snapshot bytes | log bytes |", "|---|---|---|"]
    for name, size in report["sizes"].items():
        if isinstance(size, dict):
            lines.append(f"| {name} | {size['snap']:,} | {size['log']:,} |")
        else:
            lines.append(f"| {name} | | {size:,} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
