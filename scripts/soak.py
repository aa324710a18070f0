#!/usr/bin/python3
"""Hardening drill: many concurrent, misbehaving clients against one real mnemo-server.

N streams (--streams, default 256) run for --seconds (default 600) on loopback, each looping
over a mix of calls: Generate streaming one-shot and on a session, Score one-shot and on a
session, Tokenize + Detokenize, GetSession, ListSessions, CreateSession / DeleteSession. Each
call is sent in one of four modes (soak_load.py):
  normal      72%  a 120 s deadline; must end OK
  deadline    12%  a 2-300 ms deadline; OK or DEADLINE_EXCEEDED
  cancel      12%  the client cancels (a stream after 0-8 chunks, a unary call after 0-30 ms)
  disconnect   4%  a stream on its own channel, the channel closed mid-stream (and the
                   first call of two streams, so that every run has some)
and every ~4 s a child process holding three Generate streams (one on a session) is SIGKILLed
mid-stream (its session must then become deletable), and a CreateSession, Score or Generate is
opened and reset before its request message is sent (HTTP/2 HEADERS then RST_STREAM: the
server must neither run it nor count it other than CANCELLED). Every other stream owns a session,
replaced after a random token budget (so the sessions' memory is stationary); shared sessions
(one per 8 streams) are used by all and replaced every 0.5-2 s, half of them deleted while in
use. A call that reaches its 120 s deadline counts as DEADLINE_EXCEEDED (expected; slow).

Codes: NOT_FOUND is expected only on a session this driver had sent a DeleteSession for (or
whose CreateSession it cut short); FAILED_PRECONDITION only for a DeleteSession while this
driver had a call on the session, or after one it cut short (a Generate or Score must release
it within --busy-grace s);
RESOURCE_EXHAUSTED, and NOT_FOUND for a session evicted by the LRU, only when the server runs
with limits (--max_waiting, --max_sessions, --max_memory_bytes among --server-arg, or
--expect-limits). Anything else fails the run and is printed with its message.

Verdict PASS needs all of: every code expected; every OK stream ends with a finish reason and
usage.generated_tokens equal to the tokens that arrived, and Detokenize(Tokenize(t)) == t; RSS
(VmRSS from /proc/PID/status every --rss-interval s) grows less than --max-rss-growth % (5)
from the end of the warm-up (--warmup, default the first 20% of the run) to the end of the
load, each the median of a window of samples (an eighth of those after warm-up, at least 3);
the server stays up, counts only expected codes in mnemo_requests_total, is idle
(mnemo_requests_running and _waiting 0) within 30 s of the load stopping, holds no session once
the driver has deleted its own, exits 0 on SIGTERM, and its log has no error lines (request-log
lines excepted); and the drill happened (every RPC answered OK somewhere, cancels, deadlines and
kills seen). Progress every 10 s; a summary at the end;
--json FILE keeps the record.

    scripts/soak.sh                                # 256 streams, 10 minutes, its own server
    /usr/bin/python3 scripts/soak.py --streams 64 --seconds 45 --json /tmp/soak.json
    /usr/bin/python3 scripts/soak.py --target 127.0.0.1:50051 --metrics 127.0.0.1:9090
Exit status: 0 PASS, 1 FAIL, 2 usage.
"""

import argparse
import asyncio
import ipaddress
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))
sys.path.insert(0, _HERE)

import grpc  # noqa: E402

from mnemo_client._stubs import health_pb2, health_pb2_grpc  # noqa: E402
from soak_load import Ledger, Load, run_child  # noqa: E402
from soak_server import (  # noqa: E402
    Server, loopback_pid, proc_status, rss_figures, scan_log, scrape, server_codes)

LIMIT_FLAGS = ("--max_waiting", "--max_sessions", "--max_memory_bytes")


# --- watching the server, the verdict ----------------------------------------------------------

class Monitor:
    """Samples the server's /proc status every `interval` s and prints progress every 10 s."""

    def __init__(self, pid, metrics, ledger, load, start, seconds, interval, alive):
        self.pid, self.metrics, self.ledger, self.load = pid, metrics, ledger, load
        self.start, self.seconds, self.interval, self.alive = start, seconds, interval, alive
        self.samples = []  # [t since start, rss_kb, rss_anon_kb, anon_huge_kb, maps, threads, fds]
        self.gauges = []   # [t, sessions, session_memory_bytes, running, waiting] every 10 s
        self.died_at = None

    async def run(self):
        next_print = self.start + 10
        last_calls, last_tokens, last_t = 0, 0, self.start
        while True:
            now = time.monotonic()
            status = proc_status(self.pid) if self.pid else None
            if status:
                self.samples.append([round(now - self.start, 2)] + [status[k] for k in (
                    "rss_kb", "rss_anon_kb", "anon_huge_kb", "maps", "threads", "fds")])
            if not self.alive():
                self.died_at = now - self.start
                self.load.stop_at = now  # no point going on
                print(f"[soak] the server died at {self.died_at:.0f}s", file=sys.stderr)
                return
            if now >= next_print and now < self.load.stop_at:
                gauges = await asyncio.to_thread(scrape, self.metrics) if self.metrics else {}
                if gauges:
                    self.gauges.append([round(now - self.start, 1)] + [gauges.get(k) for k in (
                        "mnemo_sessions", "mnemo_session_memory_bytes", "mnemo_requests_running",
                        "mnemo_requests_waiting")])
                self.progress(now, gauges, last_calls, last_tokens, last_t, status)
                last_calls, last_tokens, last_t = self.ledger.calls, self.ledger.tokens, now
                next_print += 10
            await asyncio.sleep(self.interval)

    def progress(self, now, gauges, last_calls, last_tokens, last_t, status):
        ledger, dt = self.ledger, max(now - last_t, 1e-9)
        codes = " ".join(f"{c}={n}" for c, n in sorted(ledger.code_totals().items()))
        server = (f" | server running {gauges.get('mnemo_requests_running', 0):.0f} waiting "
                  f"{gauges.get('mnemo_requests_waiting', 0):.0f} sessions "
                  f"{gauges.get('mnemo_sessions', 0):.0f} "
                  f"({gauges.get('mnemo_session_memory_bytes', 0) / 2**20:.0f} MB)"
                  if gauges else "")
        rss = (f"{status['rss_kb'] / 1024:.1f} MB ({status['maps']} maps)" if status
               else "n/a")
        print(f"[soak {now - self.start:4.0f}s/{self.seconds}s] calls {ledger.calls} "
              f"({(ledger.calls - last_calls) / dt:.0f}/s) tokens {ledger.tokens} "
              f"({(ledger.tokens - last_tokens) / dt:.0f}/s) rss {rss} in flight "
              f"{self.load.inflight}{server} | {codes}"
              + (f" | UNEXPECTED {ledger.unexpected_total}" if ledger.unexpected_total else ""),
              flush=True)


def check(checks, name, ok, detail):
    checks[name] = {"ok": bool(ok), "detail": detail}
    if not ok:
        print(f"[soak] FAIL {name}: {detail}", file=sys.stderr)


async def wait_serving(address, timeout_s, alive):
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("mnemo-server exited during start-up")
            try:
                r = await stub.Check(health_pb2.HealthCheckRequest(service="mnemo.v1.Generation"),
                                     timeout=1)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"mnemo-server not SERVING after {timeout_s}s")


async def wait_idle(metrics, timeout_s):
    """Polls the gauges until nothing runs or waits; returns (idle, the last gauges)."""
    deadline, gauges = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        gauges = await asyncio.to_thread(scrape, metrics)
        if gauges and gauges.get("mnemo_requests_running") == 0 and gauges.get(
                "mnemo_requests_waiting") == 0:
            return True, gauges
        await asyncio.sleep(0.5)
    return False, gauges


async def drive(args, address, metrics, pid, alive):
    """Runs the load and returns the record (everything but the server's exit and log)."""
    limits = args.expect_limits or any(a.split("=")[0] in LIMIT_FLAGS for a in args.server_arg)
    ledger = Ledger(limits, args.busy_grace)
    rng = random.Random(args.seed)
    await wait_serving(address, 180, alive)
    before = scrape(metrics) if metrics else {}
    baseline = proc_status(pid) if pid else None
    start = time.monotonic()
    load = Load(address, ledger, rng, start + args.seconds, f"soak{os.getpid()}", args.streams)
    monitor = Monitor(pid, metrics, ledger, load, start, args.seconds, args.rss_interval, alive)
    monitor_task = asyncio.ensure_future(monitor.run())
    tasks = [asyncio.ensure_future(load.stream(i)) for i in range(args.streams)]
    tasks.append(asyncio.ensure_future(load.pool_keeper()))
    if args.kill_interval > 0:
        tasks.append(asyncio.ensure_future(load.killer(args.kill_interval)))
    if args.half_open_interval > 0:
        tasks.append(asyncio.ensure_future(load.half_open(args.half_open_interval)))
    while not load.stopping():
        await asyncio.sleep(0.2)
    end_s = time.monotonic() - start
    print(f"[soak] load stopped at {end_s:.0f}s; draining the calls in flight", flush=True)
    done, pending = await asyncio.wait(tasks, timeout=60)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    crashed = [t.exception() for t in done if t.exception() is not None]
    for error in crashed[:3]:
        print(f"[soak] a driver task failed: {error!r}", file=sys.stderr)
    checks = {}
    died = monitor.died_at is not None or not alive()
    idle, gauges = (await wait_idle(metrics, 30)) if metrics and not died else (None, {})
    left = []
    if not died:
        left = await load.cleanup()
    for ch in load.channels:
        await ch.close()
    await asyncio.sleep(1.0)
    after = proc_status(pid) if pid and not died else None
    monitor_task.cancel()
    await asyncio.gather(monitor_task, return_exceptions=True)
    final_metrics = scrape(metrics) if metrics and not died else {}

    warmup_s = args.warmup if args.warmup is not None else 0.2 * args.seconds
    rss = rss_figures(monitor.samples, warmup_s, end_s)
    mine = [sid for sid in left if sid.startswith(load.prefix)]
    server_side = {}
    new_codes, old_codes = server_codes(final_metrics), server_codes(before)
    for rpc, per_code in new_codes.items():
        for code, n in per_code.items():
            delta = n - old_codes.get(rpc, {}).get(code, 0)
            if delta:
                server_side.setdefault(rpc, {})[code] = delta
    # The client judges each NOT_FOUND and FAILED_PRECONDITION it sees; the server also counts
    # those of calls the client cut short (their code never reached it).
    allowed = {"OK", "CANCELLED", "DEADLINE_EXCEEDED", "NOT_FOUND", "FAILED_PRECONDITION"} | (
        {"RESOURCE_EXHAUSTED"} if limits else set())
    odd = {f"{rpc}/{code}": n for rpc, per_code in server_side.items()
           for code, n in per_code.items() if code not in allowed}
    totals = ledger.code_totals()

    check(checks, "server_alive", not died,
          f"died at {monitor.died_at:.0f}s" if monitor.died_at is not None else "up throughout")
    check(checks, "codes", ledger.unexpected_total == 0,
          f"{ledger.unexpected_total} unexpected of {ledger.calls} calls")
    check(checks, "api_promises", not ledger.anomalies and not crashed,
          f"{len(ledger.anomalies)} anomalies, {len(crashed)} driver task failures")
    if rss["growth_pct"] is not None:
        check(checks, "rss_growth", rss["growth_pct"] < args.max_rss_growth,
              f"{rss['warmup_kb'] / 1024:.1f} MB after warm-up -> {rss['final_kb'] / 1024:.1f} "
              f"MB at the end: {rss['growth_pct']:+.2f}% (limit {args.max_rss_growth}%)")
    else:
        print("[soak] RSS not measured (no server pid): the RSS check is skipped",
              file=sys.stderr)
    if metrics and not died:
        check(checks, "server_codes", not odd,
              f"server-side codes outside {sorted(allowed)}: {odd}" if odd else
              "mnemo_requests_total holds only expected codes")
        check(checks, "idle_after_load", idle,
              f"running {gauges.get('mnemo_requests_running')} waiting "
              f"{gauges.get('mnemo_requests_waiting')} 30 s after the load stopped")
    if not died:
        stray = left if args.target is None else mine
        check(checks, "sessions_released", not stray,
              f"{len(stray)} sessions left after cleanup: {stray[:10]}" if stray else
              "no session left after cleanup")
    disrupted = (totals.get("CANCELLED", 0) > 0 and totals.get("DEADLINE_EXCEEDED", 0) > 0
                 and (ledger.kills["mid_stream"] > 0 or args.kill_interval <= 0))
    served = all(ledger.codes.get(rpc, {}).get("OK", 0) > 0 for rpc in (
        "Generate.oneshot", "Generate.session", "Score.oneshot", "Score.session", "Tokenize",
        "CreateSession", "DeleteSession", "GetSession"))
    check(checks, "traffic", ledger.tokens > 0 and served and disrupted,
          f"{ledger.calls} calls, {ledger.tokens} tokens; every RPC served: {served}; "
          f"cancels, deadlines and kills seen: {disrupted}")
    latency = {rpc: {"p50_s": round(statistics.median(v), 4),
                     "p99_s": round(sorted(v)[int(0.99 * (len(v) - 1))], 4)}
               for rpc, v in sorted(ledger.latency.items()) if v}
    return {
        "streams": args.streams, "seconds": args.seconds, "seed": args.seed,
        "load_seconds": round(end_s, 1), "warmup_seconds": warmup_s,
        "calls_total": ledger.calls, "calls": ledger.codes, "calls_by_mode": ledger.by_mode,
        "code_totals": totals, "tokens": ledger.tokens,
        "tokens_per_second": round(ledger.tokens / end_s, 1) if end_s else 0,
        "calls_per_second": round(ledger.calls / end_s, 1) if end_s else 0,
        "excused": ledger.excused, "past_120s_deadline": ledger.slow_deadlines,
        "unexpected_total": ledger.unexpected_total, "unexpected": ledger.unexpected,
        "anomalies": ledger.anomalies, "child_kills": ledger.kills,
        "delete_refused_then_released": {kind: {"deletes": n, "max_s_after_cut": lag}
                                         for kind, (n, lag) in ledger.release_lag.items()},
        "latency_ok_normal": latency, "server_codes": server_side,
        "rss_samples": [[s[0], s[1]] for s in monitor.samples],
        "rss_warmup_kb": rss["warmup_kb"], "rss_final_kb": rss["final_kb"],
        "rss_growth_pct": None if rss["growth_pct"] is None else round(rss["growth_pct"], 3),
        "rss_max_kb": rss["max_kb"],
        "rss_slope_kb_per_min_after_warmup": rss["slope_kb_per_min"] and round(
            rss["slope_kb_per_min"], 1),
        "process": {"before_load": baseline, "after_cleanup": after,
                    "samples_columns": ["t", "rss_kb", "rss_anon_kb", "anon_huge_kb", "maps",
                                        "threads", "fds"],
                    "samples": monitor.samples,
                    "gauges_columns": ["t", "sessions", "session_memory_bytes", "running",
                                       "waiting"],
                    "gauges": monitor.gauges},
        "checks": checks,
    }


def print_summary(result):
    print("\n[soak] calls by RPC and code:")
    for rpc, per_code in sorted(result["calls"].items()):
        print(f"  {rpc:18s} " + "  ".join(f"{c} {n}" for c, n in sorted(per_code.items())))
    print(f"[soak] {result['calls_total']} calls, {result['tokens']} tokens "
          f"({result['tokens_per_second']}/s) in {result['load_seconds']}s with "
          f"{result['streams']} streams; children killed mid-stream "
          f"{result['child_kills']['mid_stream']}/{result['child_kills']['children']}")
    if result["rss_growth_pct"] is not None:
        print(f"[soak] RSS: {result['rss_warmup_kb'] / 1024:.1f} MB after warm-up "
              f"({result['warmup_seconds']:.0f}s), {result['rss_final_kb'] / 1024:.1f} MB at the "
              f"end: {result['rss_growth_pct']:+.2f}%; max {result['rss_max_kb'] / 1024:.1f} MB")
    for name, c in result["checks"].items():
        print(f"  {'ok  ' if c['ok'] else 'FAIL'} {name}: {c['detail']}")
    print(f"[soak] verdict: {result['verdict']}", flush=True)


def git_state():
    """The checkout the run was made from: HEAD and whether the work tree differs from it."""
    try:
        head = subprocess.run(["git", "-C", _ROOT, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", _ROOT, "status", "--porcelain", "--", "server",
                                "engine", "proto"], capture_output=True, text=True,
                               timeout=30).stdout.strip() != ""
        return {"head": head, "server_or_engine_modified": dirty}
    except (OSError, subprocess.TimeoutExpired):
        return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--server", default=os.path.join(_ROOT, "build", "server", "mnemo-server"),
                   help="mnemo-server binary to start (default build/server/mnemo-server)")
    p.add_argument("--model", default=os.path.join(_ROOT, "models", "mnemo-stdlib"))
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra mnemo-server flag (repeatable), e.g. --server-arg=--threads=2")
    p.add_argument("--server-log", help="where the server's output goes (default: a temp file)")
    p.add_argument("--target", help="HOST:PORT of a running server on loopback (no server is "
                   "started; its log is not checked unless --server-log names it)")
    p.add_argument("--metrics", help="with --target: the server's metrics HOST:PORT")
    p.add_argument("--server-pid", type=int, help="with --target: the pid whose RSS is sampled "
                   "(default: whoever listens on the port, if visible)")
    p.add_argument("--expect-limits", action="store_true",
                   help="RESOURCE_EXHAUSTED is expected (the target runs with limits)")
    p.add_argument("--json", help="write the record here")
    p.add_argument("--warmup", type=float, help="seconds of warm-up (default 20%% of the run)")
    p.add_argument("--max-rss-growth", type=float, default=5.0, help="percent (default 5)")
    p.add_argument("--rss-interval", type=float, default=2.0)
    p.add_argument("--busy-grace", type=float, default=10.0,
                   help="seconds a session may stay busy after a call the driver cut short")
    p.add_argument("--kill-interval", type=float, default=4.0,
                   help="mean seconds between child kills (0: none)")
    p.add_argument("--half-open-interval", type=float, default=4.0,
                   help="mean seconds between calls reset before their request (0: none)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is None:
        if not 1 <= args.streams <= 1024 or not 0 < args.seconds <= 24 * 3600:
            p.error("--streams must be in [1, 1024] and --seconds in (0, 86400]")
        if any(a.split("=")[0] in ("--listen", "--metrics_listen") for a in args.server_arg):
            p.error("the driver picks the server's addresses (free loopback ports)")
        for address in filter(None, (args.target, args.metrics)):
            host = address.rsplit(":", 1)[0].strip("[]")
            if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
                p.error(f"{address}: loopback only")
    return args


def main(argv):
    args = parse_args(argv)
    if args.child:
        asyncio.run(run_child(*args.child))
        return 0
    server = None
    log_path = args.server_log
    if args.target is None:
        if not os.access(args.server, os.X_OK):
            print(f"soak: no server binary at {args.server}", file=sys.stderr)
            return 2
        log_path = log_path or os.path.join(tempfile.mkdtemp(prefix="mnemo-soak-"),
                                            "mnemo-server.log")
        binary_built = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                     time.gmtime(os.stat(args.server).st_mtime))
        server = Server(args.server, args.model, args.server_arg, log_path)
        address, metrics, pid, alive = server.address, server.metrics, server.pid, server.alive
        print(f"[soak] {' '.join(server.args)}\n[soak] server pid {pid}, log {log_path}",
              flush=True)
    else:
        address, metrics = args.target, args.metrics
        pid = args.server_pid or loopback_pid(args.target)
        alive = (lambda: proc_status(pid) is not None) if pid else (lambda: True)
    print(f"[soak] {args.streams} streams for {args.seconds:.0f}s against {address}, seed "
          f"{args.seed}", flush=True)
    try:
        try:
            result = asyncio.run(drive(args, address, metrics, pid, alive))
        except RuntimeError as error:  # the server never answered SERVING
            print(f"[soak] {error}", file=sys.stderr)
            if log_path and os.path.exists(log_path):
                with open(log_path, "rb") as f:
                    sys.stderr.write(f.read()[-4000:].decode("utf-8", "replace"))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"verdict": "FAIL", "error": str(error)}, f)
            return 1
        checks = result["checks"]
        if server is not None:
            rc = server.stop(grace_s=60)
            check(checks, "clean_exit", rc == 0, f"exit code {rc} on SIGTERM")
            result["server"] = {"binary": args.server, "args": server.args, "pid": pid,
                                "exit_code": rc, "binary_built": binary_built}
        if log_path and os.path.exists(log_path):
            errors, log_codes = scan_log(log_path)
            check(checks, "server_log", not errors,
                  f"{len(errors)} error lines, e.g. {errors[:3]}" if errors else
                  "no error lines")
            result["server_log"] = {"path": log_path, "error_lines": errors[:50],
                                    "request_log_codes": log_codes}
    finally:
        if server is not None and server.alive():
            server.proc.kill()
    result["target"] = args.target
    result["git"] = git_state()
    result["verdict"] = "PASS" if all(c["ok"] for c in checks.values()) else "FAIL"
    print_summary(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
