#!/usr/bin/env bash
# Builds mnemo with a sanitizer into its own build directory and runs test suites under it.
#
#   scripts/sanitize.sh asan [CTEST_REGEX]   AddressSanitizer + UndefinedBehaviorSanitizer
#                                            (build-asan/); default: every suite, unit and
#                                            integration
#   scripts/sanitize.sh tsan [CTEST_REGEX]   ThreadSanitizer (build-tsan/); default: the
#                                            engine's threaded suites (scheduler, parallel
#                                            decoder, reactor, lifecycle, tenancy)
#   scripts/sanitize.sh asan --ci            the ASan+UBSan subset CI runs (see CI_ASAN below)
#
# Any sanitizer report fails the run (halt_on_error / abort); the reports are in the CTest log
# (build-*/ctest.log). Only the targets the chosen suites need are built.
# ThreadSanitizer needs every lock instrumented: `tsan` first builds Debian's Abseil and gRPC
# with TSan into build-tsan/tsan-libs (scripts/tsan_libs.sh, once, ~20 minutes on 2 cores) and
# builds and runs against them.
# Environment: MNEMO_JOBS (default nproc), MNEMO_SANITIZE_BUILD_DIR (default build-asan /
# build-tsan under the repository root).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
shift || true
jobs="${MNEMO_JOBS:-$(nproc)}"

# The subset CI runs under ASan+UBSan: the code that parses untrusted bytes and needs no model
# to build (the tokenizers — byte, BPE, tokenizer.json, UTF-8 — and the request conversion and
# validation), cheap enough for CI's 2 cores. The fuzz targets (scripts/fuzz.sh, also under
# ASan+UBSan) cover the snapshot, safetensors and config readers.
CI_ASAN_TARGETS=(utf8_test byte_tokenizer_test tokenizer_test hf_tokenizer_test
                 proto_convert_test)
CI_ASAN_REGEX='^(Utf8Test|ByteTokenizerTest|TokenizerTest|HfTokenizerTest|ProtoConvertTest|StatusConvertTest)\.'
TSAN_REGEX='SchedulerTest|ParallelDecoderTest|GenerateTest|LifecycleTest|TenancyTest|SessionQueueTest|RequestQueueTest|IterationExecutorTest|DurabilityTest'
TSAN_TARGETS=(scheduler_test parallel_decoder_test generate_test lifecycle_test tenancy_test
              session_queue_test request_queue_test iteration_executor_test durability_test)

case "$mode" in
  asan) sanitize=address; build_dir="${MNEMO_SANITIZE_BUILD_DIR:-$root/build-asan}" ;;
  tsan) sanitize=thread; build_dir="${MNEMO_SANITIZE_BUILD_DIR:-$root/build-tsan}" ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [CTEST_REGEX | --ci]" >&2; exit 2 ;;
esac

regex="${1:-}"
targets=()
if [ "$mode" = asan ] && [ "$regex" = "--ci" ]; then
  regex="$CI_ASAN_REGEX"
  targets=("${CI_ASAN_TARGETS[@]}")
elif [ "$mode" = tsan ] && [ -z "$regex" ]; then
  regex="$TSAN_REGEX"
  targets=("${TSAN_TARGETS[@]}")
fi

bash "$root/scripts/setup.sh"
extra_configure=()
if [ "$mode" = tsan ]; then
  libs_prefix="$build_dir/tsan-libs"
  MNEMO_JOBS="$jobs" bash "$root/scripts/tsan_libs.sh" "$libs_prefix"
  extra_configure+=(-Dabsl_DIR="$libs_prefix/lib/cmake/absl")
  # Every process of the run (test binaries, the servers integration tests start) loads the
  # instrumented libraries before the system's: same SONAMEs, so they stand in for them.
  export LD_LIBRARY_PATH="$libs_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
start=$(date +%s)
cmake -S "$root" -B "$build_dir" -G Ninja -DMNEMO_BUILD_TESTS=ON -DMNEMO_SANITIZE="$sanitize" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra_configure[@]}" \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
echo "sanitize: building ($mode${targets:+: ${targets[*]}}) in $build_dir"
cmake --build "$build_dir" -j "$jobs" "${target_args[@]}"
[ ${#targets[@]} -eq 0 ] && bash "$root/clients/python/generate_stubs.sh"
echo "sanitize: built in $(( $(date +%s) - start ))s"

supp="$root/scripts/sanitizers"
# Leak checking is off: LibTorch, gRPC and OpenMP keep process-lifetime allocations that
# LeakSanitizer reports at exit; use-after-free, overflows and UB stay fatal. An allocation
# too large to satisfy fails as it does without ASan (a null from the allocator, which
# LibTorch turns into an error that mnemo reports) instead of aborting the process: tests
# check that a memory that cannot fit is refused at creation.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:${TSAN_OPTIONS:-}"
# The child processes integration tests start inherit these.

log="$build_dir/ctest.log"
ctest_args=(--output-on-failure --timeout 1800 -j "$jobs")
[ -n "$regex" ] && ctest_args+=(-R "$regex")
set +e
(cd "$build_dir" && ctest "${ctest_args[@]}") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
reports=$(grep -cE '^(==[0-9]+==ERROR: |WARNING: ThreadSanitizer|SUMMARY: (Address|Undefined|Thread))|runtime error:' "$log" || true)
echo "sanitize: $mode: ctest exit $rc, sanitizer reports: $reports, $(( $(date +%s) - start ))s"
[ "$rc" -eq 0 ] && [ "$reports" -eq 0 ]
