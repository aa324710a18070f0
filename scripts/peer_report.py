#!/usr/bin/python3
"""The report of scripts/peer_bench.py: its rows (medians over rounds, ratios, targets met or
missed), peers.md and the gnuplot bar chart peers.png. Measuring is peer_bench.py's job; this
module only reads what it recorded (samples keyed `configuration/program/variant`) and its
Settings.
"""

import dataclasses
import os
import re
import statistics
import subprocess
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from peer_bench import Settings

DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
STREAM_PROMPT_TOKENS = 16  # prompt length of the decode measurements (one and S streams)


def spread(values: Sequence[float]) -> Dict[str, float]:
    """Median, min and max of `values` (an empty dict for none)."""
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


# --- Summary -------------------------------------------------------------------------------

@dataclasses.dataclass
class Row:
    """One line of the results table: mnemo's key against ggml's reference."""

    label: str
    ggml_label: str
    ggml_value: Optional[dict]
    mnemo_value: Optional[dict]
    target: Optional[float] = None
    target_note: str = ""

    @property
    def ratio(self) -> Optional[float]:
        if not self.ggml_value or not self.mnemo_value:
            return None
        return self.mnemo_value["median"] / self.ggml_value["median"]

    @property
    def met(self) -> Optional[bool]:
        if self.target is None or self.ratio is None:
            return None
        return self.ratio >= self.target


def best_of(samples: Dict[str, List[float]], prefix: str) -> Tuple[str, Optional[dict]]:
    """The variant under `prefix` with the highest median (ggml's reference), and its spread."""
    variants = {k[len(prefix):]: spread(v) for k, v in samples.items() if k.startswith(prefix)}
    if not variants:
        return "", None
    name = max(variants, key=lambda k: variants[k]["median"])
    return name, variants[name]


def build_rows(s: "Settings", samples: Dict[str, List[float]], has_bf16: bool) -> List[Row]:
    """The results table, in order: one stream, S streams, prefill, other dtypes."""

    def get(key: str) -> Optional[dict]:
        return spread(samples.get(key, [])) or None

    rows = []
    ref1_name, ref1 = best_of(samples, "decode1/ggml/")
    rows.append(Row("1 stream decode, fp32, mnemo in-process", ref1_name, ref1,
                    get("decode1/mnemo-inproc/float32"), 1.0))
    rows.append(Row("1 stream decode, fp32, mnemo server", ref1_name, ref1,
                    get("decode1/mnemo-server/float32"), 1.0))
    for streams in s.streams:
        target = 2.0 if streams == 16 else None
        rows.append(Row(f"{streams} streams decode (aggregate), fp32, mnemo server",
                        "gpt-2-batched", get(f"decode{streams}/ggml/gpt-2-batched"),
                        get(f"decode{streams}/mnemo-server/float32"), target))
    for p in s.prefill:
        name, ref = best_of(samples, f"prefill{p}/ggml/")
        target = 1.0 if p == 512 else None
        rows.append(Row(f"prefill {p} tokens, fp32, mnemo server (P / TTFT)", name, ref,
                        get(f"prefill{p}/mnemo-server/float32"), target))
    for dtype in s.dtypes:
        if dtype == "float32":
            continue
        short = DTYPE_SHORT.get(dtype, dtype)
        bf16_target = 1.6 if dtype == "bfloat16" else None
        note = "" if has_bf16 or bf16_target is None else "no avx512_bf16: target not applied"
        bf16_target = bf16_target if has_bf16 else None
        for where in ("inproc", "server"):
            label = "in-process" if where == "inproc" else "server"
            rows.append(Row(f"1 stream decode, {short}, mnemo {label}", f"{ref1_name} (fp32)",
                            ref1, get(f"decode1/mnemo-{where}/{dtype}"), bf16_target, note))
        es, ep = s.extra_streams, s.extra_prefill
        rows.append(Row(f"{es} streams decode (aggregate), {short}, mnemo server",
                        "gpt-2-batched (fp32)", get(f"decode{es}/ggml/gpt-2-batched"),
                        get(f"decode{es}/mnemo-server/{dtype}")))
        name, ref = best_of(samples, f"prefill{ep}/ggml/")
        rows.append(Row(f"prefill {ep} tokens, {short}, mnemo server (P / TTFT)",
                        f"{name} (fp32)", ref, get(f"prefill{ep}/mnemo-server/{dtype}")))
    return rows


def fmt_spread(value: Optional[dict], digits: int = 1) -> str:
    if not value:
        return "–"
    if value["n"] == 1:
        return f"{value['median']:.{digits}f}"
    return (f"{value['median']:.{digits}f} ({value['min']:.{digits}f}–"
            f"{value['max']:.{digits}f})")


def fmt_target(row: Row) -> Tuple[str, str]:
    if row.target is None:
        return (row.target_note or "–"), "–"
    met = "–" if row.met is None else ("**met**" if row.met else "**missed**")
    return f">= {row.target:g}x", met


def escape_cell(text: str, limit: int = 60) -> str:
    shown = text if len(text) <= limit else text[:limit] + "…"
    shown = shown.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")
    return f"`{shown}`" if shown.strip() else "(empty)"


def agreement_markdown(agreement: List[dict], n_new: int) -> List[str]:
    lines = [f"| # | prompt | prompt tokens ggml / mnemo | first 8 ids | {n_new}-token greedy "
             "continuation (mnemo) | ggml vs mnemo |", "|---|---|---|---|---|---|"]
    for i, a in enumerate(agreement, 1):
        ids_ok = "same" if a["ggml_first_ids"] == a["mnemo_ids"][:8] else "**differ**"
        if a["identical"]:
            verdict = f"identical ({a['generated_tokens']} tokens)"
        else:
            verdict = (f"**differ** from generated token {a['first_diff_token']} "
                       f"(byte {a['first_diff_byte']}); ggml: {escape_cell(a['ggml_text'])}")
        if not a["tokenization_matches"]:
            verdict += " (prompt tokenized differently: not comparable)"
        lines.append(f"| {i} | {escape_cell(a['prompt'], 90)} | {a['ggml_tokens']} / "
                     f"{a['mnemo_tokens']} | {ids_ok} | {escape_cell(a['mnemo_text'])} | "
                     f"{verdict} |")
    return lines


def results_markdown(rows: List[Row]) -> List[str]:
    lines = ["| configuration | ggml reference | ggml tok/s | mnemo tok/s | mnemo / ggml | "
             "target | |", "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        ratio = "–" if row.ratio is None else f"{row.ratio:.2f}x"
        target, met = fmt_target(row)
        lines.append(f"| {row.label} | {row.ggml_label or '–'} | {fmt_spread(row.ggml_value)} | "
                     f"{fmt_spread(row.mnemo_value)} | {ratio} | {target} | {met} |")
    return lines


def details_markdown(s: "Settings", samples: Dict[str, List[float]]) -> List[str]:
    """Every measured key, as median (min–max) over rounds."""
    lines = ["| measurement | unit | median (min–max) |", "|---|---|---:|"]
    for key in sorted(samples, key=_detail_order):
        unit = "ms" if "-ms/" in key else "tok/s"
        lines.append(f"| `{key}` | {unit} | {fmt_spread(spread(samples[key]))} |")
    return lines


def failures_markdown(failures: List[dict]) -> List[str]:
    """The variants that could not run, one line per key and reason."""
    if not failures:
        return []
    seen: Dict[Tuple[str, str], List[int]] = {}
    for f in failures:
        seen.setdefault((f["key"], f["reason"]), []).append(f["round"] + 1)
    lines = ["", "Variants that could not run or be measured (no sample; details in "
             "`peers.json`):", ""]
    for (key, reason), rounds in seen.items():
        lines.append(f"- `{key}` (round {', '.join(map(str, rounds))}): {escape_cell(reason, 200)}")
    return lines


def _detail_order(key: str) -> Tuple[str, int, str]:
    m = re.match(r"([a-z]+)(\d+)/(.*)", key)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else (key, 0, "")


def how_measured_markdown(s: "Settings") -> List[str]:
    n = s.decode_tokens
    return [
        f"- Same weights: the Hugging Face folder for mnemo, its ggml conversion "
        f"(`{os.path.basename(s.ggml_model)}`, f32) for ggml. Every program ran with "
        f"{s.threads} threads (ggml `-t {s.threads}`; mnemo `--threads {s.threads}`, whose "
        "defaults for a model this size are one decode step and prefill on all threads), greedy (ggml `--top_k 1 --ignore-eos`, mnemo "
        "temperature 0, no stop at end-of-sequence).",
        f"- Rounds: {s.rounds}; in each round every configuration ran ggml first, then mnemo. "
        "Figures are the median over rounds with (min–max); the ratio is of the medians.",
        f"- Timing prompts are {STREAM_PROMPT_TOKENS} tokens (decode) or P tokens (prefill) of "
        "common one-token English words; ggml's reported prompt length was checked on every run.",
        f"- One stream, ggml: gpt-2-backend and gpt-2-ctx each ran with `-n 1` and "
        f"`-n {n + 1}`; tok/s = {n} / (difference of their `predict time`). The reference is "
        "the faster program.",
        f"- One stream, mnemo in-process: `mnemo-decode-batch-bench` (batch 1, {s.steps} timed "
        f"steps, histories of {STREAM_PROMPT_TOKENS}–{STREAM_PROMPT_TOKENS + n} tokens, the "
        "range ggml decodes over); tok/s = batch / wall time per step. No gRPC, no sampling "
        "loop of the server.",
        f"- One stream, mnemo server: `mnemo-bench --concurrency 1` ({max(s.requests, 3)} "
        f"requests of {n} tokens after 1 warmup); tok/s = 1 / mean inter-token latency as the "
        "client sees it.",
        f"- S streams: ggml `gpt-2-batched -np S -n {n}` (prompt shared and not timed; tok/s "
        f"= n_decoded / predict time) against `mnemo-bench --concurrency S` ({s.requests} "
        f"request(s) per stream of {n} tokens, 1 warmup per stream; tok/s = output tokens / "
        "wall time of the level, prefill of each request included). `decode-only` in the "
        "details is S / mean inter-token latency.",
        "- Prefill: ggml's `predict time` with `-n 1` (the prompt's evaluation only) for "
        "gpt-2-backend and gpt-2-ctx with prompt batches of 32 (default) and of P; the "
        f"reference is the fastest. mnemo: time to first token through the server "
        f"(Python client, max_new_tokens 1, median of {s.ttft_repeats} after one untimed "
        "call), so it also includes gRPC and the first token's sampling; tok/s = P / TTFT. "
        f"P is capped at {s.n_ctx - 1} (the model's {s.n_ctx} positions less the sampled token).",
        "- Other weight dtypes: mnemo restarted with `--weight_dtype`; the ratio is against "
        "the same round's ggml fp32 figures (ggml's example runs f32 weights).",
        "- Run it on an idle machine: with another process on one of the cores, ggml's "
        f"{s.threads} threads (which spin at each barrier) were seen to slow down 10–50x, "
        "mnemo far less, so the ratios mean nothing then; the load averages above tell.",
        "- Agreement: gpt-2-backend `-n N` prints the N tokens it sampled; mnemo generated N "
        "tokens from the ids of its own tokenization of the prompt (checked against ggml's "
        "count and first 8 ids); the continuations are compared byte for byte.",
    ]


def write_markdown(path: str, report: dict, rows: List[Row], s: "Settings") -> None:
    meta = report["meta"]
    targets = [r for r in rows if r.met is not None]
    lines = [
        "<!-- Generated by scripts/peer_bench.sh (scripts/peer_bench.py); do not edit by hand:"
        " rerun it. -->",
        "# mnemo vs ggml (examples/gpt-2), GPT-2 124M on CPU",
        "",
        "Generated entirely by `scripts/peer_bench.sh`" + (" (**--quick smoke run: tiny "
                                                            "settings, not a measurement**)"
                                                            if s.quick else "") + ".",
        "",
        f"- Command: `{meta['command']}`",
        f"- Date: {meta['date']} (took {meta['duration_s'] / 60:.1f} min)",
        f"- mnemo git revision: `{meta['git_rev']}`" + (" (working tree has changes)"
                                                       if meta["git_dirty"] else ""),
        f"- ggml: {meta['ggml_rev'] or 'revision not given (set GGML_SRC or --ggml_rev)'}",
        f"- CPU: {meta['cpu_model']}, {meta['cpus']} logical CPUs; flags of interest: "
        f"{', '.join(meta['cpu_flags']) or 'none'}",
        f"- Threads: {s.threads} for both; load average before the run: "
        f"{meta['loadavg_start']}" + (" (**the machine was not idle: figures are noisy**)"
                                      if meta["busy_at_start"] else "") +
        "; at the start of each round: " + "; ".join(meta["loadavg_rounds"]) +
        f"; at the end: {meta['loadavg_end']}",
        f"- Model: `{s.hf_model}` (mnemo), `{s.ggml_model}` (ggml)",
        "- mnemo binaries (copied at the start): " + "; ".join(
            f"`{os.path.basename(k)}` built {v['mtime']}, sha256 {v['sha256_16']}…"
            for k, v in meta["mnemo_binaries"].items()),
        "",
        "## Agreement (greedy, fp32)",
        "",
        *agreement_markdown(report["agreement"], s.agreement_tokens),
        "",
        "## Results",
        "",
        f"Throughput in tokens/s, median over {s.rounds} round(s) with (min–max); ratio = "
        "mnemo / ggml.",
        "",
        *results_markdown(rows),
        "",
        f"Targets: {sum(r.met for r in targets)} of {len(targets)} met.",
        "",
        "![ggml vs mnemo tokens/s](peers.png)",
        "",
        "## How measured",
        "",
        *how_measured_markdown(s),
        "",
        "## All measurements",
        "",
        "Keys are `configuration/program/variant`; `ggml-ms` is ggml's prompt time, "
        "`mnemo-ttft-ms` mnemo's time to first token. Raw samples and commands: `peers.json`.",
        "",
        *details_markdown(s, report["samples"]),
        *failures_markdown(report["failures"]),
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_plot(path: str, s: "Settings", samples: Dict[str, List[float]], tmp: str) -> None:
    """Grouped bars (log scale): ggml's reference and mnemo (server, per dtype) per config."""

    def median(key: str) -> Optional[float]:
        return statistics.median(samples[key]) if samples.get(key) else None

    groups = [("1 stream (server)", best_of(samples, "decode1/ggml/")[1],
               "decode1/mnemo-server"),
              ("1 stream (in-process)", best_of(samples, "decode1/ggml/")[1],
               "decode1/mnemo-inproc")]
    for streams in s.streams:
        groups.append((f"{streams} streams", spread(samples.get(
            f"decode{streams}/ggml/gpt-2-batched", [])), f"decode{streams}/mnemo-server"))
    for p in s.prefill:
        groups.append((f"prefill {p}", best_of(samples, f"prefill{p}/ggml/")[1],
                       f"prefill{p}/mnemo-server"))
    data_path = os.path.join(tmp, "peers.dat")
    measured = []
    with open(data_path, "w") as f:
        for label, ref, mnemo_prefix in groups:
            values = [ref["median"] if ref else None]
            values += [median(f"{mnemo_prefix}/{dtype}") for dtype in s.dtypes]
            measured += [v for v in values if v]
            f.write(f'"{label}" ' + " ".join("?" if v is None else f"{v:.3f}" for v in values)
                    + "\n")
    low, high = (min(measured) / 2, max(measured) * 8) if measured else (1, 1000)
    ticks = [m * 10 ** e for e in range(-1, 7) for m in (1, 2, 5) if low <= m * 10 ** e <= high]
    titles = ["ggml fp32"] + [f"mnemo {DTYPE_SHORT.get(d, d)}" for d in s.dtypes]
    plots = [f"'{data_path}' using 2:xtic(1) title '{titles[0]}'"]
    plots += [f"'' using {i + 2} title '{t}'" for i, t in enumerate(titles[1:], 1)]
    script = "\n".join([
        "set terminal pngcairo size 1200,600 font 'sans,10'",
        f"set output '{path}'",
        "set datafile missing '?'",
        "set title 'GPT-2 124M, ggml (examples/gpt-2) vs mnemo, " +
        f"{s.threads} threads: tokens/s (log scale)'",
        "set style data histograms",
        "set style histogram clustered gap 1",
        "set style fill solid 0.85 border -1",
        "set logscale y",
        f"set yrange [{low:.3g}:{high:.3g}]",
        "set grid ytics",
        "set key inside top left horizontal reverse Left",
        "set ytics (" + ", ".join(f"'{t:g}' {t:g}" for t in ticks) + ")",
        "set xtics rotate by -20",
        "set ylabel 'tokens/s'",
        "plot " + ", ".join(plots),
    ])
    script_path = os.path.join(tmp, "peers.gp")
    with open(script_path, "w") as f:
        f.write(script + "\n")
    subprocess.run(["gnuplot", script_path], check=True, capture_output=True)


