#!/usr/bin/env bash
# Builds the runtime and stress tests with a sanitizer and runs them through ctest:
#   scripts/sanitize.sh thread    ThreadSanitizer                      (build-tsan/)
#   scripts/sanitize.sh address   AddressSanitizer + UndefinedBehavior (build-asan/)
# Only runtime_test and stress_test are built and run (model/train tests need no
# sanitizer: they hold no cross-thread state of their own). Under a sanitizer the tests
# shrink their sweeps (DTSIM_TEST_SMALL, stress_scale()) to keep CI within its budget.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
case "$kind" in
  thread) dir=build-tsan ;;
  address) dir=build-asan ;;
  *)
    echo "usage: scripts/sanitize.sh thread|address (got '$kind')" >&2
    exit 2
    ;;
esac

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags=""
# GCC 12 warns (-Wtsan) that TSan does not model atomic_thread_fence. The doorbell's
# seq_cst fences guard no plain data (the mailboxes publish with acquire/release, which
# TSan does model), so the warning is noise there; the flight recorder uses no fences.
if [[ $kind == thread ]] && echo | c++ -Wno-tsan -x c++ -fsyntax-only - 2>/dev/null; then
  flags="-Wno-tsan"
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTSIM_SANITIZE="$kind" \
  -DCMAKE_CXX_FLAGS="$flags" -DDTSIM_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" --target runtime_test stress_test

# halt_on_error: the first report fails the test; second_deadlock_stack helps read lock
# reports. UBSan aborts on the first finding (-fno-sanitize-recover in CMakeLists.txt).
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 ${UBSAN_OPTIONS:-}"
# Only the runtime and stress tests (by label); stress_cli* and the CLI tests drive the
# Release dtsim binary, which is not built here.
# Not here: the CLI tests, release_has_no_mutants and stress_fuzz_tenth (binaries this build
# does not make), and the runtime suites over MPI (OpenMPI is not built with the sanitizer).
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" -L '^(runtime|stress)$' \
  -E '^(stress_cli|stress_fuzz|release_has_no_mutants|runtime_test\.(mpi|hybrid))'
