#!/usr/bin/env bash
# The kernel cache's and the executor's concurrency under ThreadSanitizer: the unit tests of the
# cache, the cached compiler, the per-engine cache directory (two engines in two threads), the
# thread pool and the optimizer on an engine's threads, then the executor's threaded paths (every
# sample model pipelined at 2 and 3 threads, kernels split by calls and by hidden units, the
# waiting caller assisting, independent batches side by side) and the random-cell
# differential test (EDB_TSAN_CELL_PROGRAMS programs, default 100: 1-3 threads, recording into a
# trace while it executes), in their own build
# directory (default build-tsan/; EDB_TSAN_BUILD_DIR changes it). Any report fails. Extra arguments
# go to the unit test binary (e.g. --gtest_filter=KernelCache.*).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${EDB_TSAN_BUILD_DIR:-build-tsan}
command -v cmake >/dev/null && command -v ninja >/dev/null || scripts/setup.sh
jobs=${EDB_JOBS:-2}
tsan_flags="-fsanitize=thread -fno-omit-frame-pointer"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Tsan \
    -DCMAKE_CXX_FLAGS_TSAN="-O1 -g1 $tsan_flags" \
    -DCMAKE_EXE_LINKER_FLAGS_TSAN="$tsan_flags" \
    -DCMAKE_SHARED_LINKER_FLAGS_TSAN="$tsan_flags" \
    -DEDB_NATIVE=ON -DEDB_PYTHON=OFF >&2
fi
start=$(date +%s)
# The unit tests, the threaded correctness tests and the tools they run (edb-run, edb-cache).
cmake --build "$build_dir" -j"$jobs" --target edb_unit_tests edb_correctness_tests edb-run edb-cache >&2
built=$(date +%s)
echo "tsan: built in $((built - start)) s" >&2

export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1"
export EDB_CACHE_DIR="$PWD/$build_dir/kernel-cache"
filter='--gtest_filter=KernelCache.*:CachedCompiler.*:CacheDirectory.*:ThreadPool.*:EdbCacheTool.*:OptimizerThreads.*:OptimizerErrors.*'
status=0
"$build_dir/tests/edb_unit_tests" "$filter" "$@" || status=$?
if ((status == 0)); then
  "$build_dir/tests/edb_correctness_tests" '--gtest_filter=Threads.*:SideBySide.*:CompiledCells.SmallBatchesSplitByHiddenUnits' || status=$?
fi
if ((status == 0)); then
  EDB_FUZZ_CELL_PROGRAMS=${EDB_TSAN_CELL_PROGRAMS:-100} "$build_dir/tests/edb_correctness_tests" \
    '--gtest_filter=DifferentialCells.RandomCellProgramsEqualReference' || status=$?
fi
echo "tsan: tests took $(( $(date +%s) - built )) s (exit $status)" >&2
exit $status
