#!/usr/bin/env bash
# Builds Debian's own Abseil with -fsanitize=thread into PREFIX, for the ThreadSanitizer build
# (scripts/sanitize.sh tsan). Every lock in mnemo is an absl::Mutex, and so are gRPC's; Debian's
# libabsl is not instrumented, so TSan would never see them taken and would report every field
# they guard. This fetches the source of the installed libabsl-dev with apt (a private state
# directory under PREFIX.src, the machine's own mirrors as deb-src, apt's signature checks),
# applies Debian's patches (dpkg-source) and builds it the way Debian does (C++17, shared
# libraries, the same SONAMEs and options) plus TSan, so the instrumented libraries stand in
# for the system's in every process that loads them first (gRPC's calls included).
#
#   scripts/tsan_abseil.sh PREFIX      installs PREFIX/lib/libabsl_*.so and PREFIX/lib/cmake/absl
#
# Does nothing when PREFIX already holds this version. Environment: MNEMO_JOBS (default nproc).
# ~6 minutes on 2 cores.
set -euo pipefail

prefix="${1:?usage: scripts/tsan_abseil.sh PREFIX}"
jobs="${MNEMO_JOBS:-$(nproc)}"
version="$(dpkg-query -W -f='${Version}' libabsl-dev)"
stamp="$prefix/.mnemo-tsan-abseil-$version"
if [ -f "$stamp" ]; then
  echo "tsan-abseil: $prefix holds Abseil $version with TSan"
  exit 0
fi

work="$prefix.src"
rm -rf "$work"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources"
# The machine's own Debian sources, as deb-src.
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && sed -n 's/^deb \(.*\)/deb-src \1/p' "$f"
done >"$work/apt/sources/mnemo.list"
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f" >"$work/apt/sources/$(basename "$f")"
done
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources/mnemo.list"
          -o "Dir::Etc::SourceParts=$work/apt/sources"
          -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
          -o "APT::Sandbox::User=root")
echo "tsan-abseil: fetching the source of libabsl-dev $version"
apt-get "${apt_opts[@]}" -qq update
(cd "$work" && apt-get "${apt_opts[@]}" -qq source --download-only "abseil=$version")
(cd "$work" && dpkg-source -x --no-check ./abseil_*.dsc src >/dev/null)

echo "tsan-abseil: building it with -fsanitize=thread into $prefix"
start=$(date +%s)
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
cmake --build "$work/build" -j "$jobs" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  exit 1
}
cmake --install "$work/build" >/dev/null
touch "$stamp"
rm -rf "$work"
echo "tsan-abseil: done in $(( $(date +%s) - start ))s"
