#!/usr/bin/python3
"""mnemo against the ggml peer (examples/gpt-2) on the same GPT-2 124M weights.

Writes OUT_DIR/peers.md, OUT_DIR/peers.json and OUT_DIR/peers.png. Run it through
scripts/peer_bench.sh, which checks the arguments and finds the binaries:

    scripts/peer_bench.sh GGML_BIN_DIR HF_MODEL_DIR [OUT_DIR] [--rounds 3] [--quick] ...

What it does, in order:
  1. Agreement: for a few English prompts, ggml's greedy continuation (gpt-2-backend,
     --top_k 1) and mnemo's (greedy, through the server, fp32 weights) are compared byte for
     byte, after checking that both tokenized the prompt the same way.
  2. --rounds rounds of timing. In each round every configuration runs ggml first, then
     mnemo, on the same prompt lengths and the same number of threads:
       * one stream decode: gpt-2-backend and gpt-2-ctx (two runs, -n 1 and -n N+1, the
         difference is N decode steps), mnemo in-process (mnemo-decode-batch-bench) and
         mnemo through the server (mnemo-bench, one stream: 1 / mean inter-token latency);
       * S streams: gpt-2-batched -np S against mnemo-bench --concurrency S;
       * prefill of P tokens: ggml's prompt time (-n 1; gpt-2-backend and gpt-2-ctx, prompt
         batch 32 and P) against mnemo's time to first token through the server;
       * the other --dtypes: mnemo with those weights, against the round's ggml fp32 numbers.
  3. Summary (scripts/peer_report.py): medians over rounds with (min-max), ratios mnemo /
     ggml, targets met or missed, peers.md and peers.png.

Prompts used for timing are made of common English words that are one GPT-2 token each, so
ggml's simplified tokenizer and mnemo's BPE agree on their length; every ggml run's reported
prompt length is checked, and the run fails loudly when it differs.
"""

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))

from mnemo_client import Client  # noqa: E402
from peer_report import (STREAM_PROMPT_TOKENS, build_rows, write_markdown,  # noqa: E402
                         write_plot)

# Common English words that GPT-2's BPE and ggml's greedy tokenizer both read as one token
# each (with the leading space). The timing prompts are built from them.
WORDS = ("of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
         "from", "his", "her", "are", "not", "but", "had", "has", "have", "one", "all", "can",
         "you", "they", "this", "which", "their", "will", "there", "been", "more", "when",
         "who", "were", "what", "into", "said", "time", "out", "hello", "the")

# Prompts whose greedy continuations are compared (ggml and GPT-2 BPE tokenize them alike).
AGREEMENT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog",
    "Once upon a time, there was a little girl who lived in a village near the forest.",
    "The capital of France is Paris, and the capital of Germany is",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
)

CPU_FLAGS_OF_INTEREST = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
                         "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")

# Settings of a full run and of a --quick smoke run; explicit flags override either.
FULL = dict(rounds=3, decode_tokens=128, streams="4,16,64", prefill="128,512,1024",
            requests=2, steps=16, ttft_repeats=3, agreement_tokens=32)
QUICK = dict(rounds=1, decode_tokens=16, streams="4,16", prefill="64,512",
             requests=1, steps=4, ttft_repeats=1, agreement_tokens=32)

# *.py files mnemo-decode-batch-bench primes its sessions with (only their length matters).
PYTHON_STDLIB = os.path.dirname(os.__file__)
SUBPROCESS_TIMEOUT_S = 1800


# --- Small helpers -------------------------------------------------------------------------

class Progress:
    """Progress lines on stderr, each with the time since the start."""

    def __init__(self):
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def log(self, message: str) -> None:
        print(f"[peer_bench {self.elapsed():7.1f}s] {message}", file=sys.stderr, flush=True)


_ERROR_LINE = re.compile(r"assert|error|failed to|not enough|abort", re.I)


class CommandFailed(RuntimeError):
    """A benchmark program exited non-zero; `reason` is the gist of its stderr."""

    def __init__(self, cmd: Sequence[str], returncode: int, stderr: str):
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        gist = [line for line in lines if _ERROR_LINE.search(line)][:2] or lines[-1:]
        self.reason = " / ".join(gist) or f"exit {returncode}"
        super().__init__(f"command failed (exit {returncode}): {short_command(cmd)}\n"
                         f"{stderr[-2000:]}")


def short_command(cmd: Sequence[str], limit: int = 300) -> str:
    """`cmd` as a shell line, long arguments (prompts) elided."""
    return shlex.join(a if len(a) <= 60 else a[:40] + f"...({len(a)} chars)" for a in cmd)[:limit]


def run_command(cmd: Sequence[str], timeout_s: float = SUBPROCESS_TIMEOUT_S) -> Tuple[bytes, float]:
    """Runs `cmd`, returns (stdout bytes, wall seconds); raises CommandFailed on failure."""
    start = time.monotonic()
    proc = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout_s, check=False)
    wall_s = time.monotonic() - start
    if proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout, wall_s


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def csv_ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def csv_strings(text: str) -> List[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# --- Prompts --------------------------------------------------------------------------------

def build_prompt(n_tokens: int) -> str:
    """English-like text of exactly `n_tokens` GPT-2 tokens: "The" then single-token words."""
    words = ["The"] + [WORDS[i % len(WORDS)] for i in range(n_tokens - 1)]
    return " ".join(words)


class PromptBook:
    """The timing prompts, each checked once against mnemo's tokenizer."""

    def __init__(self, client: Client):
        self.client = client
        self.prompts: Dict[int, Tuple[str, List[int]]] = {}

    def get(self, n_tokens: int) -> Tuple[str, List[int]]:
        """(text, mnemo token ids) of the `n_tokens`-token prompt."""
        if n_tokens not in self.prompts:
            text = build_prompt(n_tokens)
            ids = self.client.tokenize(text)
            if len(ids) != n_tokens:
                raise RuntimeError(f"prompt meant to be {n_tokens} tokens is {len(ids)} tokens "
                                   f"for mnemo's tokenizer: {text[:80]!r}...")
            self.prompts[n_tokens] = (text, ids)
        return self.prompts[n_tokens]


# --- ggml ----------------------------------------------------------------------------------

_PROMPT_LINE = re.compile(
    rb"number of tokens in prompt = (\d+), first 8 tokens: ([0-9 ]*)\n")
_PREDICT_MS = re.compile(rb"main:\s+predict time =\s+([0-9.]+) ms")
_N_DECODED = re.compile(rb"main:\s+n_decoded =\s+(\d+)")
_LOAD_TIME = b"\n\nmain:     load time"


def parse_prompt_line(stdout: bytes) -> Tuple[int, List[int]]:
    """ggml's "number of tokens in prompt = P, first 8 tokens: ..." as (P, ids)."""
    m = _PROMPT_LINE.search(stdout)
    if not m:
        raise RuntimeError("ggml output has no 'number of tokens in prompt' line")
    return int(m.group(1)), [int(x) for x in m.group(2).split()]


def parse_predict_ms(stdout: bytes) -> float:
    m = _PREDICT_MS.search(stdout)
    if not m:
        raise RuntimeError("ggml output has no 'predict time' line")
    return float(m.group(1))


def parse_n_decoded(stdout: bytes) -> int:
    m = _N_DECODED.search(stdout)
    if not m:
        raise RuntimeError("ggml output has no 'n_decoded' line")
    return int(m.group(1))


def ggml_generated_bytes(stdout: bytes, prompt: str) -> bytes:
    """The continuation gpt-2-backend printed: the text after the echoed prompt."""
    m = _PROMPT_LINE.search(stdout)
    end = stdout.rfind(_LOAD_TIME)
    if not m or end < 0:
        raise RuntimeError("cannot find the generated text in ggml's output")
    text = stdout[m.end():end]
    if text.startswith(b"\n"):
        text = text[1:]
    echoed = prompt.encode()
    if not text.startswith(echoed):
        raise RuntimeError(f"ggml did not echo the prompt as given: {text[:80]!r}")
    return text[len(echoed):]


def check_same_prompt(cmd: Sequence[str], count: int, first_ids: List[int],
                      expect_ids: List[int]) -> None:
    """Raises unless ggml read the prompt as the same tokens as mnemo (count, first 8 ids)."""
    if count != len(expect_ids) or first_ids != expect_ids[:8]:
        raise RuntimeError(
            f"ggml and mnemo tokenize a timing prompt differently: ggml {count} tokens "
            f"{first_ids}, mnemo {len(expect_ids)} tokens {expect_ids[:8]}; command: "
            f"{short_command(cmd)}")


def recorded_command(cmd: List[str], prompt: str, n_tokens: int) -> List[str]:
    """`cmd` as the report records it: a timing prompt stands as "<prompt N>" (the report's
    "prompts" holds each one's text)."""
    return [f"<prompt {n_tokens}>" if arg == prompt else arg for arg in cmd]


class Ggml:
    """Runs ggml's gpt-2 examples and parses what they print."""

    def __init__(self, bin_dir: str, model: str, threads: int, n_ctx: int):
        self.bin_dir = bin_dir
        self.model = model
        self.threads = threads
        self.n_ctx = n_ctx  # the model's positions

    def _base(self, program: str, prompt: str) -> List[str]:
        return [os.path.join(self.bin_dir, program), "-m", self.model, "-p", prompt,
                "-t", str(self.threads), "--top_k", "1", "-s", "1", "--ignore-eos"]

    def single(self, program: str, prompt: str, n_predict: int, batch: Optional[int] = None,
               expect_ids: Optional[List[int]] = None) -> dict:
        """One run of gpt-2-backend / gpt-2-ctx: the prompt, then n_predict sampled tokens.

        Args:
          program: "gpt-2-backend" or "gpt-2-ctx".
          prompt: the prompt text.
          n_predict: tokens to sample (-n); the last one is never evaluated.
          batch: prompt batch size (-b); None = ggml's default (32).
          expect_ids: mnemo's ids of the prompt; when given, ggml's token count and first 8
            ids must match them.

        Returns:
          The command, its predict time in ms (all evaluations: the prompt and n_predict - 1
          decode steps), the prompt's token count and first ids, wall seconds, raw stdout.
        """
        cmd = self._base(program, prompt) + ["-n", str(n_predict)]
        if batch is not None:
            cmd += ["-b", str(batch)]
        stdout, wall_s = run_command(cmd)
        count, first_ids = parse_prompt_line(stdout)
        if expect_ids is not None:
            check_same_prompt(cmd, count, first_ids, expect_ids)
            cmd = recorded_command(cmd, prompt, len(expect_ids))
        return {"command": cmd, "predict_ms": parse_predict_ms(stdout), "prompt_tokens": count,
                "first_ids": first_ids, "wall_s": wall_s, "stdout": stdout}

    def batched(self, prompt: str, expect_ids: List[int], streams: int,
                n_predict: int) -> dict:
        """gpt-2-batched: the prompt once (not timed), then `streams` streams decoded together.

        Its KV cache is shared by all streams, so it gets room for all of them.
        """
        ctx = len(expect_ids) + streams * n_predict + 64
        cmd = [os.path.join(self.bin_dir, "gpt-2-batched"), "-m", self.model, "-p", prompt,
               "-np", str(streams), "-n", str(n_predict), "-t", str(self.threads),
               "-c", str(ctx), "--top_k", "1", "-s", "1", "--ignore-eos"]
        stdout, wall_s = run_command(cmd)
        count, first_ids = parse_prompt_line(stdout)
        check_same_prompt(cmd, count, first_ids, expect_ids)
        decoded, predict_ms = parse_n_decoded(stdout), parse_predict_ms(stdout)
        return {"command": recorded_command(cmd, prompt, len(expect_ids)),
                "n_decoded": decoded, "predict_ms": predict_ms,
                "tokens_per_s": decoded / predict_ms * 1000.0, "wall_s": wall_s}


# --- mnemo ---------------------------------------------------------------------------------

class MnemoServer:
    """A mnemo-server on loopback with one weight dtype; a context manager."""

    def __init__(self, binary: str, model: str, threads: int, dtype: str, port: int,
                 log_dir: str):
        self.port = port
        self.address = f"127.0.0.1:{port}"
        # The server's own defaults otherwise: for a model this size one decode step on all
        # threads and prefill on all threads (its start line, recorded, says which).
        self.command = [binary, "--model", model, "--threads", str(threads),
                        "--weight_dtype", dtype,
                        "--listen", self.address, "--metrics_listen", f"127.0.0.1:{port + 1}"]
        self.log_path = os.path.join(log_dir, f"server-{dtype}.log")
        self.proc = None
        self.client = None

    def __enter__(self) -> "MnemoServer":
        if not port_is_free(self.port) or not port_is_free(self.port + 1):
            raise RuntimeError(f"port {self.port} or {self.port + 1} is in use; pick --port")
        self.log = open(self.log_path, "ab")
        self.log_start = self.log.tell()  # the log is shared by all rounds' servers
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_until_serving()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_until_serving(self) -> None:
        """Waits for the "serving model" line, then checks health once. (Polling health from
        the start would put the channel into gRPC's reconnect backoff: seconds lost.)"""
        deadline = time.monotonic() + 300
        while not self._log_says("serving model"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"mnemo-server exited ({self.proc.returncode}); see "
                                   f"{self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mnemo-server did not start; see {self.log_path}")
            time.sleep(0.1)
        self.client = Client(self.address, timeout=3600)
        self.client.wait_until_serving(timeout=60)

    def _log_says(self, text: str) -> bool:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            return text.encode() in f.read()

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def mnemo_bench(binary: str, address: str, streams: int, requests: int, prompt_file: str,
                prompt_tokens: int, n_new: int, json_path: str) -> dict:
    """mnemo-bench at one concurrency level; returns the figures the report uses."""
    cmd = [binary, "--target", address, "--concurrency", str(streams),
           "--requests", str(requests), "--warmup", "1", "--prompt_file", prompt_file,
           "--prompt_tokens", "0", "--max_new_tokens", str(n_new), "--deadline", "30m",
           "--progress=false", "--json", json_path]
    _, wall_s = run_command(cmd)
    with open(json_path) as f:
        level = json.load(f)["levels"][0]
    ok, failed = level["requests"]["ok"], level["requests"]["failed"]
    if failed:
        raise RuntimeError(f"mnemo-bench: {failed} failed requests: {level.get('errors')}")
    if level["usage_prompt_tokens"] != ok * prompt_tokens:
        raise RuntimeError(f"mnemo-bench prompts were {level['usage_prompt_tokens'] / ok:.1f} "
                           f"tokens, expected {prompt_tokens}")
    itl_mean = level["itl_s"]["mean"]
    return {"command": cmd, "output_tokens_per_s": level["output_tokens_per_s"],
            "itl_mean_s": itl_mean, "itl_p50_s": level["itl_s"]["p50"],
            "ttft_mean_s": level["ttft_s"]["mean"], "requests": ok,
            "output_tokens": level["output_tokens"],
            "decode_only_tokens_per_s": streams / itl_mean, "wall_s": wall_s}


_TABLE_ROW = re.compile(r"^\|(.+)\|\s*$")


def parse_decode_batch_table(stdout: str) -> Dict[int, float]:
    """mnemo-decode-batch-bench's Markdown table: {batch size: wall ms per batched step}."""
    header, result = None, {}
    for line in stdout.splitlines():
        m = _TABLE_ROW.match(line.strip())
        if not m:
            continue
        cells = [c.strip() for c in m.group(1).split("|")]
        if header is None:
            if "wall ms/step" in cells:
                header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        row = dict(zip(header, cells))
        if row.get("mode", "").startswith("batched"):
            result[int(row["B"])] = float(row["wall ms/step"])
    if not result:
        raise RuntimeError("no batched rows in mnemo-decode-batch-bench's output")
    return result


def decode_batch_bench(binary: str, model: str, threads: int, dtype: str,
                       batch_sizes: Sequence[int], steps: int, min_history: int,
                       max_history: int) -> dict:
    """In-process batched decode steps (no server); tokens/s per batch size."""
    cmd = [binary, "--model", model, "--batch_sizes", ",".join(map(str, batch_sizes)),
           "--thresholds", "2", "--threads", str(threads), "--solo=false",
           "--steps", str(steps), "--weight_dtype", dtype, "--text_dir", PYTHON_STDLIB,
           "--min_history", str(min_history), "--max_history", str(max_history)]
    stdout, wall_s = run_command(cmd)
    ms = parse_decode_batch_table(stdout.decode(errors="replace"))
    history = re.search(r"mean history (\d+) tokens", stdout.decode(errors="replace"))
    return {"command": cmd, "ms_per_step": {str(b): v for b, v in ms.items()},
            "tokens_per_s": {str(b): b * 1000.0 / v for b, v in ms.items()},
            "mean_history": int(history.group(1)) if history else None, "wall_s": wall_s}


def time_to_first_token(client: Client, ids: List[int], repeats: int) -> List[float]:
    """Seconds from the Generate call to its first chunk, max_new_tokens=1; one untimed call
    first."""
    samples = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        stream = client.generate(prompt_token_ids=ids, max_new_tokens=1, temperature=0,
                                 stop_at_eos=False)
        first = next(iter(stream))
        elapsed = time.perf_counter() - start
        if not first.tokens:
            raise RuntimeError("the first chunk carries no token")
        for _ in stream:
            pass
        if i > 0:
            samples.append(elapsed)
    return samples


def mnemo_greedy_bytes(client: Client, ids: List[int], n_new: int) -> List[bytes]:
    """The bytes of each token mnemo generates greedily after `ids`."""
    out = []
    for chunk in client.generate(prompt_token_ids=ids, max_new_tokens=n_new, temperature=0,
                                 stop_at_eos=False):
        out.extend(token.bytes for token in chunk.tokens)
    return out


# --- Agreement -----------------------------------------------------------------------------

def compare_continuations(ggml_out: bytes, mnemo_tokens: List[bytes]) -> dict:
    """Where ggml's and mnemo's continuations first differ (by mnemo token), if they do."""
    mnemo_out = b"".join(mnemo_tokens)
    if ggml_out == mnemo_out:
        return {"identical": True, "first_diff_token": None, "first_diff_byte": None}
    byte = next((i for i, (a, b) in enumerate(zip(ggml_out, mnemo_out)) if a != b),
                min(len(ggml_out), len(mnemo_out)))
    consumed, token = 0, len(mnemo_tokens)
    for index, piece in enumerate(mnemo_tokens):
        consumed += len(piece)
        if consumed > byte:
            token = index
            break
    return {"identical": False, "first_diff_token": token, "first_diff_byte": byte}


def check_agreement(ggml: Ggml, client: Client, n_new: int, progress: Progress) -> List[dict]:
    """Greedy continuations of AGREEMENT_PROMPTS from ggml (gpt-2-backend) and mnemo."""
    results = []
    for prompt in AGREEMENT_PROMPTS:
        progress.log(f"agreement: {prompt[:40]!r}...")
        ids = client.tokenize(prompt)
        run = ggml.single("gpt-2-backend", prompt, n_new)
        entry = {"prompt": prompt, "mnemo_ids": ids, "mnemo_tokens": len(ids),
                 "ggml_tokens": run["prompt_tokens"], "ggml_first_ids": run["first_ids"],
                 "ggml_command": run["command"]}
        entry["tokenization_matches"] = (run["prompt_tokens"] == len(ids) and
                                         run["first_ids"] == ids[:8])
        ggml_out = ggml_generated_bytes(run["stdout"], prompt)
        mnemo_tokens = mnemo_greedy_bytes(client, ids, n_new)
        entry["ggml_text"] = ggml_out.decode(errors="replace")
        entry["mnemo_text"] = b"".join(mnemo_tokens).decode(errors="replace")
        entry["generated_tokens"] = len(mnemo_tokens)
        entry.update(compare_continuations(ggml_out, mnemo_tokens))
        results.append(entry)
    return results


# --- The timing rounds ---------------------------------------------------------------------

@dataclasses.dataclass
class Settings:
    """Everything a run is parameterised by."""

    ggml_bin_dir: str
    hf_model: str
    ggml_model: str
    out_dir: str
    mnemo_build: str
    rounds: int
    threads: int
    decode_tokens: int
    streams: List[int]
    prefill: List[int]
    dtypes: List[str]
    requests: int
    steps: int
    ttft_repeats: int
    agreement_tokens: int
    port: int
    quick: bool
    n_ctx: int
    ggml_rev: str
    binary_copies: str = ""  # where snapshot_binaries copied the mnemo binaries

    def binary(self, relative: str) -> str:
        return os.path.join(self.binary_copies or self.mnemo_build, relative)

    @property
    def extra_streams(self) -> int:
        """Streams of the other dtypes' multi-stream row: 16 where measured."""
        return 16 if 16 in self.streams else self.streams[0]

    @property
    def extra_prefill(self) -> int:
        """Prompt length of the other dtypes' prefill row: 512 where measured."""
        return 512 if 512 in self.prefill else self.prefill[0]


class Recorder:
    """Samples per configuration key (one per round) and every run's details."""

    def __init__(self):
        self.samples: Dict[str, List[float]] = {}
        self.runs: List[dict] = []
        self.failures: List[dict] = []

    def add(self, key: str, value: float, round_index: int, details: dict) -> None:
        self.samples.setdefault(key, []).append(value)
        details = {k: v for k, v in details.items() if k != "stdout"}
        self.runs.append({"key": key, "round": round_index, "value": value, **details})

    def fail(self, key: str, round_index: int, reason: str, details: str = "") -> None:
        """Records a variant that could not run or be measured (it gets no sample)."""
        self.failures.append({"key": key, "round": round_index, "reason": reason,
                              "details": details})


def ggml_single_stream(s: Settings, ggml: Ggml, prompt: str, ids: List[int], rec: Recorder,
                       r: int) -> None:
    """ggml one-stream decode tok/s: -n N+1 minus -n 1, gpt-2-backend and gpt-2-ctx."""
    for program in ("gpt-2-backend", "gpt-2-ctx"):
        short = ggml.single(program, prompt, 1, expect_ids=ids)
        long = ggml.single(program, prompt, s.decode_tokens + 1, expect_ids=ids)
        details = {"commands": [short["command"], long["command"]],
                   "predict_ms": [short["predict_ms"], long["predict_ms"]],
                   "wall_s": short["wall_s"] + long["wall_s"]}
        decode_ms = long["predict_ms"] - short["predict_ms"]
        if decode_ms <= 0:  # only on a machine too busy to measure anything
            rec.fail(f"decode1/ggml/{program}", r, "the longer run took no longer",
                     json.dumps(details))
            continue
        rec.add(f"decode1/ggml/{program}", s.decode_tokens / decode_ms * 1000.0, r, details)


def mnemo_in_process(s: Settings, dtype: str, batch_sizes: List[int], rec: Recorder,
                     r: int) -> None:
    """mnemo-decode-batch-bench at `batch_sizes`, histories spanning the decode range."""
    result = decode_batch_bench(s.binary("tools/decode_batch_bench/mnemo-decode-batch-bench"),
                                s.hf_model, s.threads, dtype, batch_sizes, s.steps,
                                STREAM_PROMPT_TOKENS, STREAM_PROMPT_TOKENS + s.decode_tokens)
    first = f"decode{batch_sizes[0]}/mnemo-inproc/{dtype}"
    for b in batch_sizes:
        key = f"decode{b}/mnemo-inproc/{dtype}"
        rec.add(key, result["tokens_per_s"][str(b)], r,
                result if key == first else {"same_run_as": first})


def mnemo_streams(s: Settings, server: MnemoServer, streams: int, prompt_file: str,
                  dtype: str, tmp: str, rec: Recorder, r: int) -> None:
    """mnemo-bench through the server: 1 / mean ITL for one stream, else tokens/s."""
    requests = max(s.requests, 3) if streams == 1 else s.requests
    result = mnemo_bench(s.binary("clients/cpp/mnemo-bench"), server.address, streams,
                         requests, prompt_file, STREAM_PROMPT_TOKENS, s.decode_tokens,
                         os.path.join(tmp, f"bench-{dtype}-{streams}-r{r}.json"))
    value = 1.0 / result["itl_mean_s"] if streams == 1 else result["output_tokens_per_s"]
    key = f"decode{streams}/mnemo-server/{dtype}"
    rec.add(key, value, r, result)
    if streams > 1:
        rec.add(f"decode{streams}/mnemo-server-decode-only/{dtype}",
                result["decode_only_tokens_per_s"], r, {"same_run_as": key})


def ggml_prefill(ggml: Ggml, p: int, prompt: str, ids: List[int], rec: Recorder,
                 r: int) -> None:
    """ggml's prompt time with -n 1, batches of 32 and of the whole prompt, both programs.

    A variant that crashes (gpt-2-ctx's fixed memory pool is too small for long batches) is
    recorded as a failure; the reference is the fastest variant that ran.
    """
    for program in ("gpt-2-backend", "gpt-2-ctx"):
        for batch in sorted({32, p}):
            key = f"prefill{p}/ggml/{program}-b{batch}"
            try:
                run = ggml.single(program, prompt, 1, batch=batch, expect_ids=ids)
            except CommandFailed as error:
                rec.fail(key, r, error.reason, str(error))
                continue
            rec.add(key, p / run["predict_ms"] * 1000.0, r, run)
            rec.add(f"prefill{p}/ggml-ms/{program}-b{batch}", run["predict_ms"], r,
                    {"same_run_as": key})


def mnemo_prefill(s: Settings, server: MnemoServer, p: int, ids: List[int], dtype: str,
                  rec: Recorder, r: int) -> None:
    """mnemo's time to first token through the server; prefill tok/s = P / TTFT."""
    samples = time_to_first_token(server.client, ids, s.ttft_repeats)
    ttft = statistics.median(samples)
    key = f"prefill{p}/mnemo-server/{dtype}"
    rec.add(key, p / ttft, r, {"ttft_samples_s": samples, "prompt_tokens": p})
    rec.add(f"prefill{p}/mnemo-ttft-ms/{dtype}", ttft * 1000.0, r, {"same_run_as": key})


def write_prompt_file(tmp: str, text: str) -> str:
    path = os.path.join(tmp, "stream_prompt.txt")
    with open(path, "w") as f:
        f.write(text)
    return path


def fp32_round(s: Settings, ggml: Ggml, server: MnemoServer, book: PromptBook, tmp: str,
               rec: Recorder, r: int, progress: Progress) -> None:
    """One round of every fp32 configuration, ggml then mnemo for each."""
    text, stream_ids = book.get(STREAM_PROMPT_TOKENS)
    prompt_file = write_prompt_file(tmp, text)
    where = f"round {r + 1}/{s.rounds}"

    progress.log(f"{where}: one stream, ggml gpt-2-backend and gpt-2-ctx")
    ggml_single_stream(s, ggml, text, stream_ids, rec, r)
    progress.log(f"{where}: mnemo in-process, batch sizes 1,{','.join(map(str, s.streams))}")
    mnemo_in_process(s, "float32", [1] + s.streams, rec, r)
    progress.log(f"{where}: one stream, mnemo server")
    mnemo_streams(s, server, 1, prompt_file, "float32", tmp, rec, r)

    for streams in s.streams:
        progress.log(f"{where}: {streams} streams, ggml gpt-2-batched")
        run = ggml.batched(text, stream_ids, streams, s.decode_tokens)
        rec.add(f"decode{streams}/ggml/gpt-2-batched", run["tokens_per_s"], r, run)
        progress.log(f"{where}: {streams} streams, mnemo server")
        mnemo_streams(s, server, streams, prompt_file, "float32", tmp, rec, r)

    for p in s.prefill:
        prompt, ids = book.get(p)
        progress.log(f"{where}: prefill {p}, ggml (4 variants)")
        ggml_prefill(ggml, p, prompt, ids, rec, r)
        progress.log(f"{where}: prefill {p}, mnemo server")
        mnemo_prefill(s, server, p, ids, "float32", rec, r)


def other_dtype_round(s: Settings, dtype: str, server: MnemoServer, book: PromptBook,
                      tmp: str, rec: Recorder, r: int, progress: Progress) -> None:
    """One round of mnemo with `dtype` weights: one stream, extra_streams, extra_prefill."""
    text, _ = book.get(STREAM_PROMPT_TOKENS)
    prompt_file = write_prompt_file(tmp, text)
    where = f"round {r + 1}/{s.rounds} {dtype}"
    progress.log(f"{where}: mnemo in-process, batch sizes 1,{s.extra_streams}")
    mnemo_in_process(s, dtype, [1, s.extra_streams], rec, r)
    progress.log(f"{where}: one stream and {s.extra_streams} streams, mnemo server")
    mnemo_streams(s, server, 1, prompt_file, dtype, tmp, rec, r)
    mnemo_streams(s, server, s.extra_streams, prompt_file, dtype, tmp, rec, r)
    progress.log(f"{where}: prefill {s.extra_prefill}, mnemo server")
    _, ids = book.get(s.extra_prefill)
    mnemo_prefill(s, server, s.extra_prefill, ids, dtype, rec, r)


# --- Environment ---------------------------------------------------------------------------

def lscpu() -> Tuple[str, List[str], List[str]]:
    """(model name, flags of interest present, all flags)."""
    out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, check=False).stdout
    model = re.search(r"^Model name:\s*(.+)$", out, re.M)
    flags = re.search(r"^Flags:\s*(.+)$", out, re.M)
    all_flags = flags.group(1).split() if flags else []
    return (model.group(1).strip() if model else "unknown",
            [f for f in CPU_FLAGS_OF_INTEREST if f in all_flags], all_flags)


def git_state() -> Tuple[str, bool]:
    def git(*args):
        return subprocess.run(["git", "-C", _ROOT, *args], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.DEVNULL, check=False).stdout.strip()
    return git("rev-parse", "HEAD") or "unknown", bool(git("status", "--porcelain",
                                                           "--untracked-files=no"))


def ggml_revision(given: str) -> str:
    """--ggml_rev, else GGML_SRC's git HEAD (or its CMake version), else ""."""
    if given:
        return given
    src = os.environ.get("GGML_SRC", "")
    if not src:
        return ""
    rev = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=False).stdout.strip()
    if rev:
        return f"commit {rev} ({src})"
    try:
        with open(os.path.join(src, "CMakeLists.txt")) as f:
            cmake = f.read()
        parts = [re.search(rf"set\(GGML_VERSION_{p} (\d+)\)", cmake) for p in
                 ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return f"version {'.'.join(m.group(1) for m in parts)} ({src}, not a git checkout)"
    except OSError:
        pass
    return f"{src} (revision unknown)"


MNEMO_BINARIES = ("server/mnemo-server", "clients/cpp/mnemo-bench",
                  "tools/decode_batch_bench/mnemo-decode-batch-bench")


def snapshot_binaries(s: Settings, tmp: str) -> Dict[str, dict]:
    """Copies the mnemo binaries under `tmp` and runs those, so that a rebuild of the build
    directory during the run cannot swap or break them. Returns what was copied."""
    copies = os.path.join(tmp, "mnemo-build")
    recorded = {}
    for relative in MNEMO_BINARIES:
        source = os.path.join(s.mnemo_build, relative)
        target = os.path.join(copies, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target)
        with open(target, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        mtime = datetime.datetime.fromtimestamp(os.path.getmtime(source), datetime.timezone.utc)
        recorded[relative] = {"path": source, "sha256_16": digest,
                              "mtime": mtime.strftime("%Y-%m-%d %H:%M:%S UTC")}
    s.binary_copies = copies
    return recorded


def model_positions(hf_model: str) -> int:
    with open(os.path.join(hf_model, "config.json")) as f:
        config = json.load(f)
    return int(config.get("n_positions") or config.get("n_ctx") or 1024)


# --- Main ----------------------------------------------------------------------------------

def parse_args(argv: Sequence[str]) -> Settings:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ggml_bin_dir", required=True, help="ggml's bin/ (gpt-2-backend, ...)")
    p.add_argument("--hf_model", required=True, help="Hugging Face GPT-2 folder for mnemo")
    p.add_argument("--ggml_model", default="", help="ggml model file (default: "
                   "HF_MODEL/ggml-model-f32.bin)")
    p.add_argument("--out_dir", default=os.path.join(_ROOT, "docs", "results"))
    p.add_argument("--mnemo_build", default=os.path.join(_ROOT, "build"))
    p.add_argument("--rounds", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode_tokens", type=int, help="tokens decoded per stream")
    p.add_argument("--streams", help="comma-separated stream counts (besides 1)")
    p.add_argument("--prefill", help="comma-separated prompt lengths")
    p.add_argument("--dtypes", default="float32,bfloat16,float16",
                   help="mnemo weight dtypes; float32 first (the comparison with ggml)")
    p.add_argument("--requests", type=int, help="mnemo-bench requests per stream")
    p.add_argument("--steps", type=int, help="mnemo-decode-batch-bench timed steps")
    p.add_argument("--ttft_repeats", type=int, help="timed TTFT calls per round")
    p.add_argument("--agreement_tokens", type=int, help="tokens compared per prompt")
    p.add_argument("--port", type=int, default=50700, help="mnemo-server port (+1: metrics)")
    p.add_argument("--ggml_rev", default="", help="ggml revision to record")
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    a = p.parse_args(argv)
    preset = QUICK if a.quick else FULL

    def pick(name):
        return getattr(a, name) if getattr(a, name) is not None else preset[name]

    n_ctx = model_positions(a.hf_model)
    dtypes = csv_strings(a.dtypes)
    if not dtypes or dtypes[0] != "float32":
        p.error("--dtypes must start with float32")
    prefill = [min(x, n_ctx - 1) for x in csv_ints(pick("prefill"))]
    streams = csv_ints(pick("streams"))
    if not streams or min(streams) < 2:
        p.error("--streams: stream counts above 1 (one stream is always measured)")
    if not prefill or min(prefill) < 2:
        p.error("--prefill: prompt lengths of at least 2 tokens")
    if pick("rounds") < 1:
        p.error("--rounds must be at least 1")
    decode_tokens = pick("decode_tokens")
    if STREAM_PROMPT_TOKENS + decode_tokens + 1 > n_ctx:
        p.error(f"--decode_tokens must be below {n_ctx - STREAM_PROMPT_TOKENS}")
    return Settings(
        ggml_bin_dir=a.ggml_bin_dir, hf_model=a.hf_model,
        ggml_model=a.ggml_model or os.path.join(a.hf_model, "ggml-model-f32.bin"),
        out_dir=a.out_dir, mnemo_build=a.mnemo_build, rounds=pick("rounds"),
        threads=a.threads, decode_tokens=decode_tokens, streams=streams,
        prefill=list(dict.fromkeys(prefill)), dtypes=dtypes, requests=pick("requests"),
        steps=pick("steps"), ttft_repeats=pick("ttft_repeats"),
        agreement_tokens=pick("agreement_tokens"), port=a.port, quick=a.quick, n_ctx=n_ctx,
        ggml_rev=a.ggml_rev)


def check_inputs(s: Settings) -> None:
    """Fails early, with a clear message, on a missing binary or model file."""
    needed = [os.path.join(s.ggml_bin_dir, b) for b in ("gpt-2-backend", "gpt-2-ctx",
                                                         "gpt-2-batched")]
    needed += [s.binary(b) for b in MNEMO_BINARIES]
    needed += [s.ggml_model, os.path.join(s.hf_model, "config.json")]
    missing = [path for path in needed if not os.path.exists(path)]
    if missing:
        sys.exit("peer_bench: missing: " + ", ".join(missing))


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine_meta(s: Settings) -> dict:
    """What the report says about the machine and the code, taken before anything runs."""
    cpu_model, cpu_flags, all_flags = lscpu()
    git_rev, git_dirty = git_state()
    load = loadavg()
    return {
        "command": os.environ.get("PEER_BENCH_COMMAND") or shlex.join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_rev": git_rev, "git_dirty": git_dirty, "ggml_rev": ggml_revision(s.ggml_rev),
        "cpu_model": cpu_model, "cpu_flags": cpu_flags, "cpus": os.cpu_count(),
        "has_avx512_bf16": "avx512_bf16" in all_flags,
        "loadavg_start": load, "busy_at_start": float(load.split()[0]) > 0.5,
        "stream_prompt_tokens": STREAM_PROMPT_TOKENS,
    }


def run_benchmarks(s: Settings, tmp: str, meta: dict, progress: Progress
                   ) -> Tuple[List[dict], Recorder]:
    """The agreement check, then the rounds; fills meta's server commands."""
    ggml = Ggml(s.ggml_bin_dir, s.ggml_model, s.threads, s.n_ctx)
    rec = Recorder()
    meta["server_commands"] = {}

    def server(dtype: str) -> MnemoServer:
        started = MnemoServer(s.binary("server/mnemo-server"), s.hf_model, s.threads, dtype,
                              s.port, tmp)
        meta["server_commands"][dtype] = started.command
        return started

    progress.log("starting mnemo-server float32 for the agreement check")
    with server("float32") as srv:
        agreement = check_agreement(ggml, srv.client, s.agreement_tokens, progress)
    meta["loadavg_rounds"] = []
    for r in range(s.rounds):
        meta["loadavg_rounds"].append(loadavg())
        for dtype in s.dtypes:
            progress.log(f"round {r + 1}/{s.rounds}: starting mnemo-server {dtype}")
            with server(dtype) as srv:
                book = PromptBook(srv.client)
                if dtype == "float32":
                    fp32_round(s, ggml, srv, book, tmp, rec, r, progress)
                else:
                    other_dtype_round(s, dtype, srv, book, tmp, rec, r, progress)
    return agreement, rec


def write_report(s: Settings, meta: dict, agreement: List[dict], rec: Recorder,
                 tmp: str) -> None:
    """peers.json, peers.md and peers.png under s.out_dir."""
    rows = build_rows(s, rec.samples, meta["has_avx512_bf16"])
    report = {
        "meta": meta,
        "settings": {k: v for k, v in dataclasses.asdict(s).items() if k != "binary_copies"},
        "agreement": agreement,
        "results": [dict(label=r.label, ggml_reference=r.ggml_label, ggml=r.ggml_value,
                         mnemo=r.mnemo_value, ratio=r.ratio, target=r.target, met=r.met,
                         note=r.target_note) for r in rows],
        "prompts": {str(n): build_prompt(n) for n in sorted({STREAM_PROMPT_TOKENS, *s.prefill})},
        "samples": rec.samples,
        "failures": rec.failures,
        "runs": rec.runs,
    }
    text = json.dumps(report, indent=1)
    # Commands name the build directory's binaries (the run used copies of them).
    text = text.replace(json.dumps(s.binary_copies)[1:-1], json.dumps(s.mnemo_build)[1:-1])
    os.makedirs(s.out_dir, exist_ok=True)
    with open(os.path.join(s.out_dir, "peers.json"), "w") as f:
        f.write(text + "\n")
    write_markdown(os.path.join(s.out_dir, "peers.md"), report, rows, s)
    write_plot(os.path.join(s.out_dir, "peers.png"), s, rec.samples, tmp)


def main(argv: Sequence[str]) -> None:
    s = parse_args(argv)
    check_inputs(s)
    progress = Progress()
    meta = machine_meta(s)
    progress.log(f"settings: {dataclasses.asdict(s)}")
    if meta["busy_at_start"]:
        progress.log(f"warning: load average {meta['loadavg_start']}: the machine is not idle")
    with tempfile.TemporaryDirectory(prefix="peer_bench.") as tmp:
        meta["mnemo_binaries"] = snapshot_binaries(s, tmp)
        agreement, rec = run_benchmarks(s, tmp, meta, progress)
        meta["loadavg_end"] = loadavg()
        meta["duration_s"] = progress.elapsed()
        progress.log("writing the report")
        write_report(s, meta, agreement, rec, tmp)
    progress.log(f"done: {s.out_dir}/peers.md, peers.json, peers.png")


if __name__ == "__main__":
    main(sys.argv[1:])
