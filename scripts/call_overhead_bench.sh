#!/usr/bin/env bash
# What API keys and the request log cost per call: mnemo-bench against mnemo-server started three
# ways, interleaved for ROUNDS rounds (default 2): request log off; the default text log; API keys
# (--auth_keys, a key sent by the client) and the JSON log. One stream of tiny calls (an 8-token
# prompt, one generated token: ~3 ms each on 2 cores), 20 s per run, so a fixed per-call cost
# shows in the request latency. Prints one line per run; the bench outputs stay in OUT_DIR.
#
#   scripts/call_overhead_bench.sh [OUT_DIR] [ROUNDS]
# Needs build/server/mnemo-server and build/clients/cpp/mnemo-bench (MNEMO_BUILD_DIR to change).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MNEMO_BUILD_DIR:-$root/build}"
out="${1:-$(mktemp -d)}"
rounds="${2:-2}"
port="${MNEMO_BENCH_PORT:-50901}"
mkdir -p "$out"
key="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf %s "$key" >"$out/key.txt"
printf '{"tenants": [{"name": "bench", "key_sha256": "%s"}]}\n' \
  "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" >"$out/keys.json"

run() {  # NAME ROUND BENCH_ARGS -- SERVER_ARGS
  local name="$1" round="$2" bench_args="$3"
  shift 3
  "$build/server/mnemo-server" --model "$root/models/mnemo-stdlib" --listen "127.0.0.1:$port" \
    --metrics_listen "" "$@" 2>"$out/server-$name-$round.log" &
  local pid=$!
  for _ in $(seq 100); do
    grep -q "serving" "$out/server-$name-$round.log" 2>/dev/null && break
    sleep 0.2
  done
  # shellcheck disable=SC2086
  "$build/clients/cpp/mnemo-bench" --target "127.0.0.1:$port" --concurrency 1 --duration 20s \
    --warmup 20 --prompt_tokens 8 --max_new_tokens 1 --progress=false $bench_args \
    --json "$out/$name-$round.json" >"$out/bench-$name-$round.txt" 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  printf '%-10s round %s  %8s requests/s  request ms: %s\n' "$name" "$round" \
    "$(sed -nE 's/.*  ([0-9.]+) requests\/s.*/\1/p' "$out/bench-$name-$round.txt")" \
    "$(awk '$1 == "request" {print "mean " $2 ", p50 " $3 ", p99 " $5}' \
      "$out/bench-$name-$round.txt")"
}

for round in $(seq "$rounds"); do
  run log_off "$round" "" --log_format off
  run log_text "$round" "" --log_format text
  run keys_json "$round" "--api_key_file $out/key.txt" --auth_keys "$out/keys.json" \
    --log_format json
done
echo "outputs: $out"
