#!/usr/bin/env bash
# Prepares, on the development machine, what a run on the lent GPU machine carries
# (docs/results/recall.md, models/mnemo-recall/README.md):
#
#   scripts/device/prepare_kit.sh          # writes .device-kit/ (ignored by git)
#
#   .device-kit/kit.tar.xz            Debian 12's Abseil, FAISS, OpenBLAS, nlohmann-json, PCRE2
#                                     and ICU's headers + libicuuc, unpacked and trimmed of
#                                     static archives and docs (the 64 MiB a call may carry)
#   .device-kit/recall_corpus.tar.xz  scripts/make_recall_corpus.py's output (3 variants)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kit="$root/.device-kit"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$kit"
grep -qx '/.device-kit/' "$root/.git/info/exclude" 2>/dev/null || echo '/.device-kit/' >>"$root/.git/info/exclude"

(cd "$work" && apt-get download libabsl-dev libabsl20220623 libfaiss-dev nlohmann-json3-dev \
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libpcre2-dev libpcre2-8-0 \
  libicu-dev libicu72 >/dev/null 2>&1)
mkdir -p "$work/root" "$work/icu"
for d in "$work"/*.deb; do
  case "$d" in
    *libicu*) dpkg -x "$d" "$work/icu" ;;
    *) dpkg -x "$d" "$work/root" ;;
  esac
done
lib=usr/lib/x86_64-linux-gnu
cp -a "$work/icu/usr/include/unicode" "$work/root/usr/include/"
cp -a "$work/icu/$lib"/libicuuc.so* "$work/root/$lib/"   # libicudata is stubbed there: training never calls ICU
rm -f "$work/root/$lib"/openblas-pthread/*.a "$work/root/$lib"/libpcre2-{16,32,posix}.a
rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/lintian"
tar -C "$work/root" -cf - . | xz -9 -T2 >"$kit/kit.tar.xz"

/usr/bin/python3 "$root/scripts/make_recall_corpus.py" "$work/corpus" --variants 3 --seed 1
tar -C "$work/corpus" -cf - . | xz -9 -T1 >"$kit/recall_corpus.tar.xz"
cp "$root/scripts/device/CMakeLists.device.txt" "$kit/"
ls -la "$kit"
