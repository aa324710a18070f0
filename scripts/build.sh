#!/usr/bin/env bash
# Installs the dependencies (scripts/setup.sh), configures and builds mnemo with Ninja + ccache.
#
#   scripts/build.sh [TARGET...]     no targets = build everything
#
# Environment:
#   MNEMO_BUILD_DIR    build directory (default: build/ at the repository root)
#   MNEMO_BUILD_TESTS  ON|OFF, build the test suites (default ON)
#   MNEMO_BUILD_TYPE   CMake build type (default: the project's, RelWithDebInfo)
#   MNEMO_JOBS         parallel jobs (default: nproc)
# Binaries land at stable paths: build/server/mnemo-server, build/tools/mnemo-model,
# build/clients/cpp/mnemo.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"
jobs="${MNEMO_JOBS:-$(nproc)}"

bash "$root/scripts/setup.sh"

export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}"
# Paths under the checkout are hashed relative to it, so another clone or build dir (CI's
# fresh clone) still hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
mkdir -p "$CCACHE_DIR"

configure_args=(-S "$root" -B "$build_dir" -G Ninja
  -DMNEMO_BUILD_TESTS="${MNEMO_BUILD_TESTS:-ON}"
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
[ -n "${MNEMO_BUILD_TYPE:-}" ] && configure_args+=(-DCMAKE_BUILD_TYPE="$MNEMO_BUILD_TYPE")

# A build dir made by another generator cannot be reused by Ninja: start it afresh.
if [ -f "$build_dir/CMakeCache.txt" ] &&
   ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build_dir/CMakeCache.txt"; then
  echo "build: $build_dir was configured with another generator; reconfiguring from scratch"
  rm -rf "$build_dir"
fi

start=$(date +%s)
cmake "${configure_args[@]}" >"${TMPDIR:-/tmp}/mnemo-configure.$$.log" 2>&1 || {
  cat "${TMPDIR:-/tmp}/mnemo-configure.$$.log"
  echo "build: cmake configure failed" >&2
  exit 1
}
rm -f "${TMPDIR:-/tmp}/mnemo-configure.$$.log"

target_args=()
for t in "$@"; do target_args+=(--target "$t"); done
cmake --build "$build_dir" -j "$jobs" "${target_args[@]}"

# Python stubs for clients/python (cheap when up to date).
bash "$root/clients/python/generate_stubs.sh"

echo "build: done in $(( $(date +%s) - start ))s -> $build_dir (ccache: $CCACHE_DIR)"
