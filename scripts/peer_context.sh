#!/usr/bin/env bash
# Per-token decode cost as one session's history grows, GPT-2 124M: mnemo with a bounded
# window and attention sinks (--window 1024 --sink_tokens 4) from 1K to HISTORIES tokens, next
# to ggml's gpt-2-backend, whose context grows until the model's 1,024 positions end.
#
#   scripts/peer_context.sh GGML_BIN_DIR HF_MODEL_DIR [HISTORIES] > docs/results/peers/context.md
#
# HISTORIES: comma-separated, ascending (default 1024,16384,131072); mnemo ingests real text
# (Python sources) up to each, ~450 tokens/s on 2 cores, so 1,048,576 takes ~40 minutes.
# ggml: per-token time at a context of P tokens = (predict time with -n 65 - with -n 1) / 64,
# with prompts of P one-token words. Threads: 2 for both. Markdown on stdout, progress on stderr.
set -euo pipefail
bin="${1:?usage: peer_context.sh GGML_BIN_DIR HF_MODEL_DIR [HISTORIES]}"
model="${2:?usage: peer_context.sh GGML_BIN_DIR HF_MODEL_DIR [HISTORIES]}"
histories="${3:-1024,16384,131072}"
build="${MNEMO_BUILD:-build}"
ggml_model="$model/ggml-model-f32.bin"
for f in "$bin/gpt-2-backend" "$build/tools/mnemo-decode-bench" "$ggml_model" "$model/config.json"; do
  [ -e "$f" ] || { echo "peer_context.sh: missing $f" >&2; exit 2; }
done

ggml_predict_ms() {  # prompt n -> ggml's predict time in ms
  "$bin/gpt-2-backend" -m "$ggml_model" -p "$1" -n "$2" -t 2 --top_k 1 -s 1 -b 512 2>&1 |
    sed -n 's/.*predict time = *\([0-9.]*\) ms.*/\1/p'
}

echo "# Per-token decode cost as one GPT-2 session grows: mnemo (bounded) vs ggml"
echo
echo "Written by \`scripts/peer_context.sh $*\` on $(date -u '+%Y-%m-%d %H:%M UTC'); reading:"
echo "[../peers_analysis.md](../peers_analysis.md)."
echo
echo "## ggml gpt-2-backend: decode ms per token as its context grows (2 threads)"
echo
echo "| context (tokens) | ms per token | tok/s |"
echo "|---:|---:|---:|"
for p in 64 256 512 896; do
  prompt="$(printf ' the%.0s' $(seq "$p"))"
  echo "ggml: context $p" >&2
  a=$(ggml_predict_ms "$prompt" 1)
  b=$(ggml_predict_ms "$prompt" 65)
  awk -v p="$p" -v a="$a" -v b="$b" \
    'BEGIN { ms = (b - a) / 64; printf "| %d-%d | %.2f | %.1f |\n", p, p + 64, ms, 1000 / ms }'
done
echo
echo "## mnemo: --window 1024 --sink_tokens 4, one session (mnemo-decode-bench, 2 threads)"
echo
echo '```'
"$build/tools/mnemo-decode-bench" --model "$model" --window 1024 --sink_tokens 4 \
  --history "$histories" --modes noknn --threads 2 --tokens 100 --warmup 10
echo '```'
