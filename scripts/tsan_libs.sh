#!/usr/bin/env bash
# Builds Debian's own Abseil and gRPC with -fsanitize=thread into PREFIX, for the ThreadSanitizer
# build (scripts/sanitize.sh tsan).
#
#   scripts/tsan_libs.sh PREFIX    PREFIX/lib: libabsl_*.so (+ lib/cmake/absl), libgrpc.so,
#                                  libgrpc++.so, libgpr.so, libupb.so, libaddress_sorting.so
#
# Why: every lock in mnemo is an absl::Mutex, and gRPC's completion queues, call combiners and
# work serializers synchronise the threads that run mnemo's reactors. Debian's libraries are
# not instrumented, so TSan sees none of that: it reported every field an absl::Mutex guards,
# then (with Abseil instrumented) writes inside gRPC whose other side it never saw.
#
# How: the source of each installed -dev package comes through apt (a private state directory
# under PREFIX.src, the machine's own mirrors as deb-src, apt's signature checks) with Debian's
# patches applied (dpkg-source), and is built the way Debian builds it (C++17, shared libraries,
# the same SONAMEs and options) plus TSan. The instrumented libraries then stand in for the
# system's in every process that finds PREFIX/lib first on LD_LIBRARY_PATH, the test servers
# included; mnemo itself still compiles against the system headers of the same versions.
# gRPC's code generators and reflection library are not rebuilt (no locks of their own).
#
# Each library is skipped when PREFIX already holds its version. Environment: MNEMO_JOBS
# (default nproc). On 2 cores: Abseil ~4 minutes, gRPC ~15 minutes (once).
set -euo pipefail

prefix="${1:?usage: scripts/tsan_libs.sh PREFIX}"
jobs="${MNEMO_JOBS:-$(nproc)}"
prefix="$(mkdir -p "$prefix" && cd "$prefix" && pwd)"
tsan_flags="-fsanitize=thread -fno-omit-frame-pointer"

# fetch_source SOURCE_PACKAGE VERSION DIR: the Debian source of that version, patched, in DIR.
fetch_source() {
  local package="$1" version="$2" dir="$3"
  local apt="$dir.apt"
  rm -rf "$dir" "$apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources"
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && sed -n 's/^deb \(.*\)/deb-src \1/p' "$f"
  done >"$apt/sources/mnemo.list"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f" >"$apt/sources/$(basename "$f")"
  done
  local apt_opts=(-o "Dir::Etc::SourceList=$apt/sources/mnemo.list"
                  -o "Dir::Etc::SourceParts=$apt/sources"
                  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
                  -o "APT::Sandbox::User=root")
  echo "tsan-libs: fetching the source of $package $version"
  apt-get "${apt_opts[@]}" -qq update
  (cd "$apt" && apt-get "${apt_opts[@]}" -qq source --download-only "$package=$version")
  (cd "$apt" && dpkg-source -x --no-check ./"${package}"_*.dsc "$dir" >/dev/null)
  rm -rf "$apt"
}

# source_version BINARY_PACKAGE: the version of its source (a binNMU's "+bN" dropped).
source_version() {
  dpkg-query -W -f='${Version}' "$1" | sed 's/+b[0-9]*$//'
}

# build_logged DIR TARGET...: builds, printing the log's tail only on failure.
build_logged() {
  local dir="$1"
  shift
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$jobs" "${targets[@]}" >"$dir.log" 2>&1 || {
    tail -n 40 "$dir.log"
    return 1
  }
}

# configure_tsan SOURCE_DIR BUILD_DIR CMAKE_ARGS...: as Debian configures (C++17, shared
# libraries, optimised with debug info) plus TSan.
configure_tsan() {
  local source="$1" build="$2"
  shift 2
  cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_C_FLAGS="$tsan_flags" -DCMAKE_CXX_FLAGS="$tsan_flags" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" "$@" >/dev/null
}

work="$prefix.src"
mkdir -p "$work"

absl_version="$(source_version libabsl-dev)"
if [ ! -f "$prefix/.mnemo-tsan-abseil-$absl_version" ]; then
  fetch_source abseil "$absl_version" "$work/abseil"
  echo "tsan-libs: building Abseil with TSan"
  start=$(date +%s)
  configure_tsan "$work/abseil" "$work/abseil-build" -DABSL_PROPAGATE_CXX_STD=ON \
    -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
  build_logged "$work/abseil-build"
  cmake --install "$work/abseil-build" >/dev/null
  touch "$prefix/.mnemo-tsan-abseil-$absl_version"
  echo "tsan-libs: Abseil done in $(( $(date +%s) - start ))s"
fi
echo "tsan-libs: $prefix holds Abseil $absl_version with TSan"

grpc_version="$(source_version libgrpc++-dev)"
if [ ! -f "$prefix/.mnemo-tsan-grpc-$grpc_version" ]; then
  fetch_source grpc "$grpc_version" "$work/grpc"
  echo "tsan-libs: building gRPC with TSan against it (~15 minutes on 2 cores)"
  start=$(date +%s)
  # Debian's provider options (debian/rules); the code generators are off, and with them the
  # targets that need libprotoc (its library is named only so that configuring succeeds).
  configure_tsan "$work/grpc" "$work/grpc-build" -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_BUILD_CODEGEN=OFF -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -Dabsl_DIR="$prefix/lib/cmake/absl" \
    -DProtobuf_PROTOC_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libprotoc.so* | head -n 1)"
  build_logged "$work/grpc-build" gpr grpc grpc++ upb address_sorting
  for lib in gpr grpc grpc++ upb address_sorting; do
    cp -P "$work/grpc-build/lib$lib.so"* "$prefix/lib/"
  done
  touch "$prefix/.mnemo-tsan-grpc-$grpc_version"
  echo "tsan-libs: gRPC done in $(( $(date +%s) - start ))s"
fi
echo "tsan-libs: $prefix holds gRPC $grpc_version with TSan"
rm -rf "$work"
