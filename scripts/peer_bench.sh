#!/usr/bin/env bash
# mnemo against the ggml peer (ggml's examples/gpt-2) on the same GPT-2 124M weights:
# greedy agreement, then one-stream / multi-stream decode and prefill throughput, interleaved
# rounds, same threads. Writes OUT_DIR/peers.md, peers.json and peers.png (scripts/peer_bench.py
# does the work; this checks the arguments and finds the binaries).
#
#   scripts/peer_bench.sh GGML_BIN_DIR HF_MODEL_DIR [OUT_DIR] [options...]
#
#   GGML_BIN_DIR  ggml's built examples: gpt-2-backend, gpt-2-ctx, gpt-2-batched
#   HF_MODEL_DIR  Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json);
#                 ggml's model is HF_MODEL_DIR/ggml-model-f32.bin unless --ggml_model FILE
#   OUT_DIR       where the report goes (default: docs/results)
#
# Options (passed to scripts/peer_bench.py; defaults of a full run):
#   --rounds 3  --threads 2  --decode_tokens 128  --streams 4,16,64  --prefill 128,512,1024
#   --dtypes float32,bfloat16,float16  --requests 2  --port 50700  --ggml_model FILE
#   --ggml_rev REV (recorded in the report; or set GGML_SRC to ggml's source checkout)
#   --quick       tiny settings for a smoke run (1 round, short decodes); not a measurement
#
# Environment:
#   MNEMO_BUILD   mnemo's build directory (default: $MNEMO_BUILD_DIR, else build/ at the
#                 repository root)
#
# Takes a while (see docs/results/peers.md for the last run's duration); run it on an idle
# machine: both programs use the same threads and any other load skews the ratios.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

die() {
  echo "peer_bench: $*" >&2
  echo "usage: scripts/peer_bench.sh GGML_BIN_DIR HF_MODEL_DIR [OUT_DIR] [options...]" \
       "(--help for more)" >&2
  exit 2
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
esac

# Positional arguments come first; everything from the first --option on goes to the .py.
positional=()
while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do
  positional+=("$1")
  shift
done
[ ${#positional[@]} -ge 2 ] || die "needs GGML_BIN_DIR and HF_MODEL_DIR"
[ ${#positional[@]} -le 3 ] || die "too many arguments: ${positional[*]:3}"
ggml_bin="${positional[0]}"
hf_model="${positional[1]}"
out_dir="${positional[2]:-$root/docs/results}"

ggml_model="$hf_model/ggml-model-f32.bin"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --ggml_model) ggml_model="${args[i + 1]:-}" ;;
    --ggml_model=*) ggml_model="${args[i]#--ggml_model=}" ;;
    -h|--help) usage; exit 0 ;;
  esac
done

build="${MNEMO_BUILD:-${MNEMO_BUILD_DIR:-$root/build}}"
[ -d "$ggml_bin" ] || die "GGML_BIN_DIR $ggml_bin is not a directory"
for b in gpt-2-backend gpt-2-ctx gpt-2-batched; do
  [ -x "$ggml_bin/$b" ] || die "missing ggml binary $ggml_bin/$b (build ggml's examples/gpt-2)"
done
[ -d "$hf_model" ] || die "HF_MODEL_DIR $hf_model is not a directory"
for f in config.json model.safetensors tokenizer.json; do
  [ -f "$hf_model/$f" ] || die "missing $hf_model/$f (a Hugging Face GPT-2 folder is needed)"
done
[ -n "$ggml_model" ] && [ -f "$ggml_model" ] ||
  die "missing ggml model file '$ggml_model' (convert the same weights to ggml f32, or pass --ggml_model FILE)"
for b in server/mnemo-server clients/cpp/mnemo-bench \
         tools/decode_batch_bench/mnemo-decode-batch-bench; do
  [ -x "$build/$b" ] || die "missing $build/$b (build mnemo: scripts/build.sh, or set MNEMO_BUILD)"
done
command -v gnuplot >/dev/null || die "gnuplot is needed for peers.png"
command -v lscpu >/dev/null || die "lscpu is needed (util-linux)"

# The command line as typed (quoted), for the report.
PEER_BENCH_COMMAND="scripts/peer_bench.sh$(printf ' %q' "${positional[@]}" "$@")"
export PEER_BENCH_COMMAND
exec /usr/bin/python3 "$root/scripts/peer_bench.py" --ggml_bin_dir "$ggml_bin" \
  --hf_model "$hf_model" --out_dir "$out_dir" --mnemo_build "$build" "$@"
