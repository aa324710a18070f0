#!/usr/bin/env bash
# Speed of one model (a Hugging Face checkpoint or a mnemo model) in one weight dtype through mnemo-server (issue 21,
# docs/results/families.md). Starts the server on loopback, waits until it is SERVING, runs
# mnemo-bench at 1 and at 16 concurrent streams, measures prefill, stops the server.
#
#   docs/results/families/run.sh CHECKPOINT_DIR WEIGHT_DTYPE LABEL [OUT_DIR]
#   e.g. docs/results/families/run.sh /work/ckpt/gpt2-124m bfloat16 gpt2_bf16
#
# Writes to OUT_DIR (default: this script's folder):
#   LABEL_c1.json, LABEL_c16.json   mnemo-bench JSON, decode at 1 / 16 streams (DURATION per
#                                   level, PROMPT_BYTES prompts, NEW_TOKENS tokens, greedy)
#   LABEL_prefill.json              mnemo-bench JSON, one stream, long prompts, max_new_tokens 1
#   LABEL_summary.json              the numbers of the table, the load average before each
#                                   phase, the server's CPU seconds and cores used over each
#                                   phase, the cores everything else used meanwhile
#                                   (other_cores: contention; mnemo-bench is in it) and
#                                   mnemo-bench's exit status (0 = no request failed)
#   LABEL_server.log                the server's stderr
#
# Environment (defaults in brackets):
#   BUILD [repo/build]  PORT [50151]  METRICS_PORT [9151]  THREADS [2]
#   DURATION [20s]  PROMPT_BYTES [128]  NEW_TOKENS [64]
#   PREFILL_BYTES [2560]  PREFILL_REQUESTS [8]
#   PHASES ["c1 c16 prefill"]   SERVER_FLAGS [""] (extra mnemo-server flags,
#                                e.g. "--prefill_threads 2")
# mnemo-bench's --prompt_tokens is a byte count for its synthetic prompts (ASCII words); the
# server tokenizes them with the checkpoint's tokenizer, so the real prompt length in tokens is
# usage_prompt_tokens / requests in the JSON (the summary has it as prompt_tokens_per_request).
#
# Prefill tok/s = mean prompt tokens per request / mean TTFT, over PREFILL_REQUESTS sequential
# requests (one stream, after one warmup request) that each generate one token: TTFT is the
# whole prompt's forward pass plus tokenization, one sampling step and the loopback round trip.
set -euo pipefail

ckpt="${1:?usage: run.sh CHECKPOINT_DIR WEIGHT_DTYPE LABEL [OUT_DIR]}"
dtype="${2:?weight dtype: float32, float16 or bfloat16}"
label="${3:?label, e.g. gpt2_bf16}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${4:-$here}"
build="${BUILD:-$root/build}"
port="${PORT:-50151}"
metrics_port="${METRICS_PORT:-9151}"
threads="${THREADS:-2}"
duration="${DURATION:-20s}"
prompt_bytes="${PROMPT_BYTES:-128}"
new_tokens="${NEW_TOKENS:-64}"
prefill_bytes="${PREFILL_BYTES:-2560}"
prefill_requests="${PREFILL_REQUESTS:-8}"
phases="${PHASES:-c1 c16 prefill}"
server_flags="${SERVER_FLAGS:-}"

server_bin="$build/server/mnemo-server"
bench_bin="$build/clients/cpp/mnemo-bench"
cli_bin="$build/clients/cpp/mnemo"
mkdir -p "$out"
log="$out/${label}_server.log"
meta="$(mktemp)"
trap 'rm -f "$meta"' EXIT

# Server CPU seconds (user + system) from /proc/PID/stat.
server_cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# CPU seconds all processes spent busy (user, nice, system, irq, softirq, steal), /proc/stat.
busy_cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat
}

# shellcheck disable=SC2086  # SERVER_FLAGS is split on purpose
"$server_bin" --model "$ckpt" --weight_dtype "$dtype" --threads "$threads" \
  --listen "127.0.0.1:$port" --metrics_listen "127.0.0.1:$metrics_port" $server_flags \
  >"$log" 2>&1 &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$meta"' EXIT
start=$(date +%s.%N)
until "$cli_bin" --address "127.0.0.1:$port" --timeout 2s health >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "run.sh: mnemo-server exited before it was ready; its log ($log):" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.5
done
ready_s=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
rss_mib=$(awk '/VmRSS/ { print $2 / 1024 }' "/proc/$server/status")
echo "run.sh: $label ready after ${ready_s}s, RSS ${rss_mib} MiB" >&2
echo "ready_s $ready_s" >>"$meta"
echo "rss_after_load_mib $rss_mib" >>"$meta"

bench() {  # PHASE, then mnemo-bench flags
  local phase="$1"; shift
  echo "load_$phase $(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$meta"
  local cpu0 busy0 t0 rc=0
  cpu0=$(server_cpu_s "$server")
  busy0=$(busy_cpu_s)
  t0=$(date +%s.%N)
  "$bench_bin" --target "127.0.0.1:$port" --temperature 0 --progress=false \
    --json "$out/${label}_${phase}.json" "$@" || rc=$?
  echo "bench_rc_$phase $rc" >>"$meta"
  echo "wall_s_$phase $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" >>"$meta"
  echo "server_cpu_s_$phase $(awk -v a="$cpu0" -v b="$(server_cpu_s "$server")" 'BEGIN { print b - a }')" >>"$meta"
  echo "busy_cpu_s_$phase $(awk -v a="$busy0" -v b="$(busy_cpu_s)" 'BEGIN { print b - a }')" >>"$meta"
}

for phase in $phases; do
  case "$phase" in
    c1|c16)
      bench "$phase" --concurrency "${phase#c}" --duration "$duration" --warmup 1 \
        --prompt_tokens "$prompt_bytes" --max_new_tokens "$new_tokens" ;;
    prefill)
      bench prefill --concurrency 1 --requests "$prefill_requests" --warmup 1 \
        --prompt_tokens "$prefill_bytes" --max_new_tokens 1 ;;
    *) echo "run.sh: unknown phase $phase" >&2; exit 2 ;;
  esac
done
echo "rss_end_mib $(awk '/VmRSS/ { print $2 / 1024 }' "/proc/$server/status")" >>"$meta"

kill -TERM "$server"
wait "$server" || true
trap 'rm -f "$meta"' EXIT

/usr/bin/python3 - "$out" "$label" "$ckpt" "$dtype" "$meta" "$phases" "$server_flags" <<'PY'
import json, os, sys
out, label, ckpt, dtype, meta_path, phases, server_flags = sys.argv[1:]
meta = {}
for line in open(meta_path):
    key, value = line.split(None, 1)
    value = value.strip()
    meta[key] = value if key.startswith("load_") else float(value)
summary = {"label": label, "checkpoint": ckpt, "weight_dtype": dtype,
           "server_flags": server_flags, **meta}
for phase in phases.split():
    doc = json.load(open(os.path.join(out, f"{label}_{phase}.json")))
    level = doc["levels"][0]
    ok = level["requests"]["ok"]
    entry = {"requests_ok": ok, "requests_failed": level["requests"]["failed"],
             "errors": level["errors"], "window_s": level["window_s"],
             "output_tokens_per_s": level["output_tokens_per_s"],
             "prompt_bytes": doc["config"]["prompt_tokens"],
             "prompt_tokens_per_request": level["usage_prompt_tokens"] / ok if ok else None,
             "ttft_mean_s": level["ttft_s"].get("mean"),
             "itl_p50_s": level["itl_s"].get("p50"),
             # server CPU over the whole bench call (warmup included) / its wall time
             "server_cores": meta[f"server_cpu_s_{phase}"] / meta[f"wall_s_{phase}"],
             # everything else on the machine over the same time (mnemo-bench included)
             "other_cores": (meta[f"busy_cpu_s_{phase}"] - meta[f"server_cpu_s_{phase}"])
                            / meta[f"wall_s_{phase}"]}
    if phase == "prefill" and ok:
        entry["prefill_tokens_per_s"] = entry["prompt_tokens_per_request"] / entry["ttft_mean_s"]
    summary[phase] = entry
path = os.path.join(out, f"{label}_summary.json")
json.dump(summary, open(path, "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
