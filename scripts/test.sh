#!/usr/bin/env bash
# Installs, builds and runs every test: the GoogleTest suites and the integration tests
# (Python end-to-end against the real mnemo-server, runtime-dependency check), all via CTest;
# then the hardening drills in CI size: the ASan+UBSan build of the parser suites
# (scripts/sanitize.sh asan --ci) and 15 seconds of each libFuzzer target after replaying its
# regressions (scripts/fuzz.sh --seconds 15, clang; ~4 minutes cold).
# Exits non-zero if anything fails.
#
# Environment: MNEMO_BUILD_DIR (default build/), MNEMO_JOBS (default nproc),
#   MNEMO_CTEST_ARGS (extra ctest arguments, e.g. "-R e2e"),
#   MNEMO_HARDENING (1 = run the drills, the default; 0 = CTest only).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"
jobs="${MNEMO_JOBS:-$(nproc)}"
start=$(date +%s)

MNEMO_BUILD_TESTS=ON bash "$root/scripts/build.sh"

# The CPU runtime every mnemo process gives itself (OpenBLAS kernels, OpenMP wait policy), set
# once here: each test process would otherwise restart itself to set it (tools/cpu_env_main.cc).
if cpu_env="$("$build_dir/tools/mnemo-cpu-env")"; then
  eval "$cpu_env"
  echo "test: CPU runtime for the test processes: $(tr '\n' ' ' <<<"${cpu_env//export /}")"
fi

log="$build_dir/ctest.log"
set +e
# shellcheck disable=SC2086
(cd "$build_dir" && ctest --output-on-failure --timeout 900 -j "$jobs" ${MNEMO_CTEST_ARGS:-}) \
  2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

# CTest's own summary: "100% tests passed, 0 tests failed out of 42".
summary="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n1)"

# The drills, each counted as one more test in the last line.
drills_passed=0
drills_failed=0
run_drill() {
  local name="$1"
  shift
  local t0
  t0=$(date +%s)
  echo "test: drill $name: $*"
  if "$@" >"$build_dir/drill-$name.log" 2>&1; then
    drills_passed=$((drills_passed + 1))
    echo "test: drill $name passed in $(( $(date +%s) - t0 ))s"
  else
    drills_failed=$((drills_failed + 1))
    tail -n 60 "$build_dir/drill-$name.log"
    echo "test: drill $name FAILED after $(( $(date +%s) - t0 ))s; log: $build_dir/drill-$name.log"
    rc=1
  fi
}
if [ "${MNEMO_HARDENING:-1}" != 0 ]; then
  run_drill asan env MNEMO_JOBS="$jobs" bash "$root/scripts/sanitize.sh" asan --ci
  # Each libFuzzer target replays its regressions, then fuzzes its seed corpus for 15 s.
  run_drill fuzz env MNEMO_JOBS="$jobs" bash "$root/scripts/fuzz.sh" --seconds 15
fi
elapsed=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ] && [ -n "$summary" ]; then
  echo "test: all tests passed in ${elapsed}s"
else
  echo "test: FAILED (ctest exit $rc) after ${elapsed}s; full log: $log"
  [ "$rc" -ne 0 ] || rc=1
fi
# Last line, in the plain form CI reads: "mnemo: N passed, N failed".
if [ -n "$summary" ]; then
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
  failed=$((failed + drills_failed))
  total=$((total + drills_passed + drills_failed))
  echo "mnemo: $((total - failed)) passed, $failed failed"
else
  echo "mnemo: 0 passed, 1 failed"
fi
exit "$rc"
