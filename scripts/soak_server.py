"""The server side of scripts/soak.py: the mnemo-server process under test (started on free
loopback ports with its output in a log file), its /proc status (VmRSS, threads, fds), its
Prometheus metrics, its log (error lines, request-log lines) and the RSS figures of a run.
Plain functions of the standard library; the driver calls them from its one event loop (the
blocking ones through asyncio.to_thread).
"""

import ctypes
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import urllib.request

# Server log lines that mean something went wrong: absl/glog ERROR and FATAL lines, structured
# error records, crashes and sanitizer reports.
ERROR_LINE = re.compile(r'^[EF]\d{4}\b|"level"\s*:\s*"(error|fatal)"|\bERROR\b|\bFATAL\b|'
                        r"Check failed|terminate called|Segmentation fault|core dumped|"
                        r"AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:|"
                        r"\] RAW: ")  # absl raw logging, e.g. "[waiter.cc : 100] RAW: ..."

def _die_with_parent():
    """In the child before exec: the server dies with this driver, even on SIGKILL."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    """A process's VmRSS and RssAnon (kB), AnonHugePages (kB, from smaps_rollup), memory
    mappings, threads and open fds; None once it is gone. The mappings tell leaked regions
    apart from a growing heap: mnemo maps one region per memory (engine/util/huge_pages.h)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/smaps_rollup") as f:
            rollup = dict(line.split(":", 1) for line in f if line.count(":") == 1)
        with open(f"/proc/{pid}/maps") as f:
            maps = sum(1 for _ in f)
        return {"rss_kb": int(fields["VmRSS"].split()[0]),
                "rss_anon_kb": int(fields["RssAnon"].split()[0]),
                "anon_huge_kb": int(rollup.get("AnonHugePages", "0 kB").split()[0]),
                "maps": maps, "threads": int(fields["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (OSError, KeyError, ValueError):
        return None


# One request-log line per RPC (--log_format): text "TIME METHOD code=CODE ..." or a JSON
# object with "method" and "code".
_TEXT_REQUEST_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z (\S+) code=([A-Z_]+)\b")


def request_log_entry(line):
    """(method, code) of a request-log line, else None. Such lines are not error lines, even
    when the RPC they record failed."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if isinstance(record, dict) and "method" in record and "code" in record:
            return str(record["method"]), str(record["code"])
        return None
    match = _TEXT_REQUEST_LINE.match(line)
    return match.groups() if match else None


def scan_log(path):
    """(error lines, request-log codes as {method: {code: n}}) of a server log."""
    errors, codes = [], {}
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            entry = request_log_entry(line)
            if entry is not None:
                per_code = codes.setdefault(entry[0], {})
                per_code[entry[1]] = per_code.get(entry[1], 0) + 1
            elif ERROR_LINE.search(line):
                errors.append(line[:500])
    return errors, codes


class Server:
    """A mnemo-server child on free loopback ports, stdout and stderr in `log_path`."""

    def __init__(self, binary, model, extra_args, log_path):
        self.address = f"127.0.0.1:{free_port()}"
        self.metrics = f"127.0.0.1:{free_port()}"
        self.log_path = log_path
        self.args = [binary, "--model", model, "--listen", self.address,
                     "--metrics_listen", self.metrics] + list(extra_args)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self.pid = self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def stop(self, grace_s):
        """SIGTERM, then the exit code (SIGKILL and None if it has not exited in grace_s)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._log.close()
                return None
        self._log.close()
        return self.proc.returncode


def loopback_pid(address):
    """The pid listening on a loopback HOST:PORT, if this user can see it; else None."""
    port = int(address.rsplit(":", 1)[1])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for row in list(f)[1:]:
                    cols = row.split()
                    if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":
                        inodes.add(cols[9])
        except OSError:
            pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def scrape(metrics):
    """Prometheus text from http://METRICS/metrics as {name{labels}: value}; {} on failure."""
    try:
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                values[key] = float(value)
            except ValueError:
                pass
    return values


def server_codes(values):
    """mnemo_requests_total as {rpc: {code: n}}."""
    codes = {}
    for key, value in values.items():
        match = re.match(r'mnemo_requests_total\{(.*)\}$', key)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            codes.setdefault(labels.get("rpc", "?"), {})[labels.get("code", "?")] = int(value)
    return codes


def rss_figures(samples, warmup_s, end_s):
    """RSS (kB) after warm-up (median of the first window of samples from warmup_s on) and at
    the end (median of the last window while the load ran), growth %, least-squares slope after
    warm-up, max. A window is an eighth of the samples after warm-up, at least 3 (a 10-minute
    run: 60 s): RSS swings by ~4% from sample to sample with the requests in flight (256 streams'
    buffers), so medians of 3 samples (6 s) could not tell 5% growth from a swing."""
    under_load = [s for s in samples if s[0] <= end_s]
    after = [s for s in under_load if s[0] >= warmup_s]
    if len(after) < 6:
        return {"warmup_kb": None, "final_kb": None, "growth_pct": None, "slope_kb_per_min": None,
                "max_kb": max((s[1] for s in under_load), default=None)}
    window = max(3, len(after) // 8)
    warm = statistics.median(s[1] for s in after[:window])
    final = statistics.median(s[1] for s in after[-window:])
    ts, rs = [s[0] for s in after], [s[1] for s in after]
    mt, mr = statistics.fmean(ts), statistics.fmean(rs)
    slope = sum((t - mt) * (r - mr) for t, r in zip(ts, rs)) / sum((t - mt) ** 2 for t in ts)
    return {"warmup_kb": warm, "final_kb": final, "growth_pct": (final - warm) / warm * 100,
            "slope_kb_per_min": slope * 60, "max_kb": max(s[1] for s in under_load)}
