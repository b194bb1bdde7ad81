#!/usr/bin/env bash
# The whole ctest suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build
# directory (default build-sanitize/; EDB_SANITIZE_BUILD_DIR changes it). Any report fails the run:
# UB aborts (-fno-sanitize-recover), ASan and LeakSanitizer halt with a non-zero exit.
# Extra arguments go to ctest (e.g. -R jit). Suppressions, each with its reason: tests/sanitizers/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build_dir=${EDB_SANITIZE_BUILD_DIR:-build-sanitize}
# On a fresh machine, setup.sh installs the packages (and builds build/ once).
command -v cmake >/dev/null && command -v ninja >/dev/null || scripts/setup.sh
jobs=${EDB_JOBS:-2}
# -O1 keeps Eigen fast enough to run the suite; asserts stay on (no NDEBUG), so Eigen's bounds
# checks run too. -g1: line numbers in reports at a fraction of full debug info's link time.
sanitize_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1 $sanitize_flags" \
    -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="$sanitize_flags" \
    -DCMAKE_SHARED_LINKER_FLAGS_SANITIZE="$sanitize_flags" \
    -DEDB_NATIVE=ON -DEDB_PYTHON=OFF >&2
fi
# Without MPI: Open MPI keeps its own allocations until exit (LeakSanitizer reports hundreds, in
# libraries it dlopens, beyond what suppressions by library name catch), and the data-parallel
# tests run edb-run under mpirun, not our code alone; they run in the plain build.
cmake -S . -B "$build_dir" -DEDB_MPI=OFF >/dev/null
start=$(date +%s)
cmake --build "$build_dir" -j"$jobs" >&2
built=$(date +%s)
echo "sanitize: built in $((built - start)) s" >&2

supp=$root/tests/sanitizers
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=0:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
# Kernels compiled by this run stay in the build directory, not in the user's cache.
export EDB_CACHE_DIR="$PWD/$build_dir/kernel-cache"
status=0
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" --timeout 1200 "$@" || status=$?
echo "sanitize: tests took $(( $(date +%s) - built )) s (exit $status)" >&2
exit $status
