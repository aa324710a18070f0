#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) and runs each for a while on
# a copy of its committed seed corpus (fuzz/corpus/TARGET, plus the saved reproducers of
# fuzz/regressions/TARGET, which are first replayed once each). Exits non-zero when a target
# crashes, leaks, trips UBSan or fails a harness check; the input that did it is kept under
# the build dir and named in the summary.
#
#   scripts/fuzz.sh [--seconds N] [--runs N] [--target NAME]... [--json FILE]
#                   [--build-only] [--make-seeds]
#
#   --seconds N    fuzz each target for N seconds (default 60; 0 = no time limit)
#   --runs N       stop each target after N executions (whichever of the two comes first)
#   --target NAME  only this target (repeatable); default: all of them
#   --json FILE    also write a summary: per target executions, seconds, exec/s, coverage, result
#   --build-only   configure and build, run nothing
#   --make-seeds   rebuild fuzz/corpus/snapshot_fuzz and fuzz/corpus/request_fuzz (make_seeds.sh)
#
# Environment:
#   MNEMO_FUZZ_BUILD_DIR  build directory (default: build-fuzz/ at the repository root)
#   MNEMO_JOBS            parallel compile jobs (default 1: the build is niced and narrow so it
#                         does not starve other builds on the machine)
#   MNEMO_FUZZ_CXX        the clang++ to build with (default clang++)
# Needs clang and libclang-rt-dev (libFuzzer and the sanitizer runtimes) besides what
# scripts/setup.sh installs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${MNEMO_JOBS:-1}"
cxx="${MNEMO_FUZZ_CXX:-clang++}"

# Each target's largest input (-max_len): a little above its largest seed.
declare -A max_len=(
  [request_fuzz]=4096
  [safetensors_fuzz]=16384
  [model_config_fuzz]=4096
  [tokenizer_fuzz]=16384
  [snapshot_fuzz]=131072
  [utf8_fuzz]=1024
)
all_targets=(request_fuzz safetensors_fuzz model_config_fuzz tokenizer_fuzz snapshot_fuzz utf8_fuzz)

seconds=60
runs=""
targets=()
json=""
build_only=0
make_seeds=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --make-seeds) make_seeds=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "fuzz: no target $t (${all_targets[*]})" >&2; exit 2; }
done
command -v "$cxx" >/dev/null || {
  echo "fuzz: $cxx not found; apt-get install clang lld libclang-rt-dev" >&2
  exit 2
}

# --- build -----------------------------------------------------------------------------------
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
configure_args=(-S "$root/fuzz" -B "$build_dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx")
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  mkdir -p "$CCACHE_DIR"
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
build_start=$(date +%s)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  mkdir -p "$build_dir"
  cmake "${configure_args[@]}" >"$build_dir/configure.log" 2>&1 || {
    cat "$build_dir/configure.log"; echo "fuzz: configure failed" >&2; exit 1; }
fi
build_targets=("${targets[@]}")
[ "$make_seeds" -eq 0 ] || build_targets+=(snapshot_seed_gen request_fuzz)
nice -n 10 cmake --build "$build_dir" -j "$jobs" --target "${build_targets[@]}"
build_seconds=$(( $(date +%s) - build_start ))
echo "fuzz: built ${build_targets[*]} in ${build_seconds}s ($build_dir, -j $jobs)"

if [ "$make_seeds" -eq 1 ]; then
  bash "$root/fuzz/make_seeds.sh" "$build_dir"
fi
[ "$build_only" -eq 0 ] || exit 0

# --- run -------------------------------------------------------------------------------------
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Leaks inside system libraries that the code cannot free (see the file).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/fuzz/lsan_suppressions.txt}"
export OMP_NUM_THREADS=1
run_root="$build_dir/runs"
# The harnesses that read files (safetensors_fuzz, tokenizer_fuzz) write each input to a
# scratch folder: in memory when /dev/shm is there.
scratch_root="$(mktemp -d -p /dev/shm mnemo-fuzz.XXXXXX 2>/dev/null || mktemp -d)"
trap 'rm -rf "$scratch_root"' EXIT
failed=0
summary=()
json_rows=()
for t in "${targets[@]}"; do
  work="$run_root/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts" "$scratch_root/$t"
  # The committed seeds are copied: libFuzzer adds what it finds to its corpus directory.
  cp -r "$root/fuzz/corpus/$t/." "$work/corpus/" 2>/dev/null || true
  regressions=()
  if [ -d "$root/fuzz/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "$root/fuzz/regressions/$t" -type f -print0 | sort -z)
  fi
  flags=(-max_len="${max_len[$t]}" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$work/artifacts/")
  log="$work/fuzz.log"
  rc=0
  replay_failed=0
  if [ ${#regressions[@]} -gt 0 ]; then
    TMPDIR="$scratch_root/$t" nice -n 10 "$build_dir/$t" "${flags[@]}" "${regressions[@]}" \
      >"$work/regressions.log" 2>&1 || { rc=$?; replay_failed=1; }
  fi
  start=$(date +%s.%N)
  if [ "$rc" -eq 0 ]; then
    run_flags=(-max_total_time="$seconds")
    [ -z "$runs" ] || run_flags+=(-runs="$runs")
    TMPDIR="$scratch_root/$t" nice -n 10 "$build_dir/$t" "${flags[@]}" "${run_flags[@]}" \
      "$work/corpus" >"$log" 2>&1 || rc=$?
  else
    cp "$work/regressions.log" "$log"
  fi
  elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  # The last progress line: "#12345  REDUCE cov: 1234 ft: 5678 corp: 90/12Kb ...".
  progress=$(grep -E '^#[0-9]+' "$log" | tail -n1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$progress")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$progress")
  corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$progress")
  artifact=$(find "$work/artifacts" -type f | head -n1)
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    result="clean"
  elif [ "$replay_failed" -eq 1 ]; then
    failed=1
    result="FAILED (exit $rc): a fuzz/regressions/$t input fails again; log $log"
  else
    failed=1
    result="FAILED (exit $rc): ${artifact:-no artifact}; log $log"
  fi
  line=$(printf '%-18s %10s execs %8s exec/s  cov %6s  ft %6s  corpus %5s  %ss  %s' \
    "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$elapsed" "$result")
  echo "fuzz: $line"
  summary+=("$line")
  json_rows+=("$(printf '{"name": "%s", "executions": %s, "seconds": %s, "exec_per_sec": %s, "coverage": %s, "features": %s, "corpus": %s, "result": "%s", "artifact": "%s"}' \
    "$t" "${execs:-0}" "$elapsed" "${rate:-0}" "${cov:-0}" "${ft:-0}" "${corp:-0}" \
    "$([ "$result" = clean ] && echo clean || echo failed)" "${artifact:-}")")
done

echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
if [ -n "$json" ]; then
  {
    echo '{'
    echo "  \"build_seconds\": $build_seconds,"
    echo '  "targets": ['
    for i in "${!json_rows[@]}"; do
      sep=","; [ "$i" -eq $(( ${#json_rows[@]} - 1 )) ] && sep=""
      echo "    ${json_rows[$i]}$sep"
    done
    echo '  ]'
    echo '}'
  } >"$json"
  echo "fuzz: wrote $json"
fi
exit "$failed"
