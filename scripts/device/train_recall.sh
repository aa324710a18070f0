#!/usr/bin/env bash
# Trains models/mnemo-recall on the lent GPU machine (models/mnemo-recall/README.md). Run there
# from the repository root with .device-kit carried (scripts/device/prepare_kit.sh made it):
#
#   DEADLINE_S=560 MAX_MINUTES=7 [CORPUS_TAR=... INIT_FROM=... LR=... WARMUP=... BATCH=...] \
#     bash scripts/device/train_recall.sh
#
# Unpacks the kit, builds mnemo-train against the machine's LibTorch (CUDA), fine-tunes the
# bundled mnemo-stdlib on the recall corpus for at most MAX_MINUTES (less when the build left
# less than DEADLINE_S seconds since the start), and writes the model's files to $OUT (the
# weights split in two: a call brings back files of at most 16 MiB; `cat` joins them).
set -euo pipefail
start=$(date +%s)
kit=.device-kit
prefix=/opt/debroot
mkdir -p "$prefix" && tar -xJf "$kit/kit.tar.xz" -C "$prefix"
lib="$prefix/usr/lib/x86_64-linux-gnu"
# ICU's data library is 31 MB; mnemo-train never calls ICU (only the Hugging Face tokenizers
# do), so a stub with its one symbol satisfies libicuuc's link.
printf 'const char icudt72_dat[64] = {0};\n' >/tmp/icudata_stub.c
cc -shared -fPIC -Wl,-soname,libicudata.so.72 -o "$lib/libicudata.so.72" /tmp/icudata_stub.c
for n in libblas.so liblapack.so libblas.so.3 liblapack.so.3; do  # FAISS's CMake names these
  [ -e "/usr/lib/x86_64-linux-gnu/$n" ] || ln -s "$lib/openblas-pthread/$n" "/usr/lib/x86_64-linux-gnu/$n"
done
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
src=/tmp/mnemo-device-src build=/tmp/mnemo-device-build
rm -rf "$src" && mkdir -p "$src"
tar --exclude=./build --exclude=./.git --exclude="./$kit" -cf - . | tar -xf - -C "$src"
cp scripts/device/CMakeLists.device.txt "$src/CMakeLists.txt"
torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" \
  -DMNEMO_DEBROOT="$prefix/usr" >/dev/null
cmake --build "$build" -j "$(nproc)" --target mnemo-train 2>&1 | tail -5
echo "built in $(( $(date +%s) - start )) s"

corpus=/tmp/recall-corpus
mkdir -p "$corpus" && tar -xJf "$kit/${CORPUS_TAR:-recall_corpus.tar.xz}" -C "$corpus"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
elapsed=$(( $(date +%s) - start ))
minutes=$(python3 -c "print(round(max(1.0, min(${MAX_MINUTES:-7}, (${DEADLINE_S:-560} - $elapsed) / 60 - 0.8)), 2))")
echo "training for at most $minutes minutes"
out=/tmp/mnemo-recall
set -o pipefail
"$build/tools/mnemo-train" --device cuda --threads 16 \
  --corpus "$corpus" --extensions .txt --out "$out" --name mnemo-recall \
  --init_from "${INIT_FROM:-models/mnemo-stdlib}" \
  --layers 6 --d_model 256 --heads 4 --seg_len 256 --mem_len 256 \
  --cmem_len 128 --cmem_rate 4 --compression conv \
  --knn_layer -3 --knn_mem_len 32768 --knn_topk 32 --calm \
  --batch "${BATCH:-32}" --steps 100000 --max_minutes "$minutes" --lr "${LR:-0.001}" --warmup_steps "${WARMUP:-200}" \
  --seed 1 --eval_every 1000 --eval_files 8 --eval_bytes 32768 --checkpoint_every 0 \
  2>&1 | tr '\r' '\n' | awk 'NR % 50 == 1 || !/^train \[/' | tee "$OUT/train.log"
cp "$out/config.json" "$out/training_card.json" "$OUT/"
split -b 9000000 -d "$out/model.safetensors" "$OUT/model.safetensors.part"
ls -la "$OUT"
echo "total $(( $(date +%s) - start )) s"
