#!/usr/bin/env bash
# Reproduces the bundled model models/mnemo-stdlib from scratch (about 1.5 hours on 2 cores):
#
#   scripts/train_model.sh [OUT_DIR] [extra mnemo-train flags...]
#
# Trains on the Python 3.11 standard library that scripts/setup.sh installs, with the exact
# flags recorded in models/mnemo-stdlib/README.md. The run is bounded by --steps (not by time),
# so the same command gives the same weights on the same machine; --resume continues an
# interrupted run from OUT_DIR/checkpoint.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"
out="${1:-$root/models/mnemo-stdlib}"
shift || true

bash "$root/scripts/build.sh" mnemo-train

exec "$build_dir/tools/mnemo-train" \
  --corpus /usr/lib/python3.11 --extensions .py --out "$out" --name mnemo-stdlib \
  --layers 6 --d_model 256 --heads 4 --seg_len 256 --mem_len 256 \
  --cmem_len 128 --cmem_rate 4 --compression conv \
  --knn_layer -3 --knn_mem_len 2048 --knn_topk 32 --calm \
  --batch 8 --steps 3000 --lr 0.002 --warmup_steps 200 --seed 1 \
  --eval_every 500 --eval_files 8 --eval_bytes 32768 --checkpoint_every 250 \
  "$@"
