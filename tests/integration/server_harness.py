"""The mnemo-server process the integration tests run against: binaries from the environment
(set by tests/integration/CMakeLists.txt) or from build/ (MNEMO_SERVER, MNEMO_MODEL_TOOL,
MNEMO_CLI), a tiny random model written with mnemo-model, free loopback ports, SERVING waited
for, and the process always stopped, whatever fails (it also dies with the test process).
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.environ.get("MNEMO_SOURCE_DIR", os.path.dirname(os.path.dirname(_HERE)))
BUILD = os.environ.get("MNEMO_BUILD_DIR", os.path.join(_ROOT, "build"))
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))

from mnemo_client import Client, MnemoError  # noqa: E402

SERVER = os.environ.get("MNEMO_SERVER", os.path.join(BUILD, "server", "mnemo-server"))
MODEL_TOOL = os.environ.get("MNEMO_MODEL_TOOL", os.path.join(BUILD, "tools", "mnemo-model"))
CLI = os.environ.get("MNEMO_CLI", os.path.join(BUILD, "clients", "cpp", "mnemo"))

# The server's cap on max_new_tokens in these tests.
MAX_NEW_TOKENS_CAP = 2048
STARTUP_TIMEOUT_S = 120


def die_with_parent() -> None:
    """Runs in the child before exec: if this test process dies (even by SIGKILL from a CTest
    timeout), the kernel kills the server too, so no server outlives its test."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A mnemo-server child process on free loopback ports, with its own tiny random model."""

    def __init__(self, workdir: str, extra_args=()):
        self.workdir = workdir
        self.model_dir = os.path.join(workdir, "model")
        self.log_path = os.path.join(workdir, "server.log")
        self.port = free_port()
        self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.proc = None
        self._log = None

    def write_model(self) -> None:
        if os.path.isdir(self.model_dir):
            return
        subprocess.run(
            [MODEL_TOOL, "init", "--out", self.model_dir, "--layers", "2", "--d_model", "64",
             "--heads", "2", "--seg_len", "16", "--mem_len", "32", "--cmem_len", "8",
             "--seed", "1"],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)

    def start(self) -> None:
        self.write_model()
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [SERVER, "--model", self.model_dir, "--listen", self.address,
             "--metrics_listen", f"127.0.0.1:{self.metrics_port}", "--threads", "2",
             "--max_new_tokens", str(MAX_NEW_TOKENS_CAP)] + self.extra_args,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)

    def wait_serving(self, client: Client) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mnemo-server exited with {self.proc.returncode} during "
                                   f"start-up:\n{self.log_tail()}")
            try:
                last = client.health(timeout=1.0)
                if last == "SERVING":
                    return
            except MnemoError as error:
                last = str(error)
            time.sleep(0.1)
        raise RuntimeError(f"mnemo-server not SERVING after {STARTUP_TIMEOUT_S}s "
                           f"(last: {last}):\n{self.log_tail()}")

    def stop(self) -> None:
        """Kills the server if it is still running; safe to call more than once."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


def launch(workdir, extra_args, add_cleanup):
    """Starts a server in `workdir` and a client to it, and waits until it serves. Their
    cleanup goes to `add_cleanup` (a TestCase's addCleanup or addClassCleanup) before anything
    can fail."""
    server = ServerProcess(workdir, extra_args)
    add_cleanup(server.stop)
    server.start()
    client = Client(server.address, timeout=60)
    add_cleanup(client.close)
    server.wait_serving(client)
    return server, client


def start_server(test_class, extra_args=()):
    """Starts a server for a TestCase class in a fresh directory it removes afterwards."""
    workdir = tempfile.mkdtemp(prefix="mnemo-e2e-")
    test_class.addClassCleanup(shutil.rmtree, workdir, ignore_errors=True)
    return launch(workdir, extra_args, test_class.addClassCleanup)
