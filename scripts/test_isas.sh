#!/usr/bin/env bash
# Runs the differential suites under each ISA narrower than this CPU's widest (EDB_ISA=avx2, then
# generic): random graphs and random cells against the reference, every sample model's values and
# gradients, finite-difference gradients, the compiled kernels and the weight-gradient kernel.
# Called by scripts/test.sh after the whole suite ran under the widest ISA.
# Usage: scripts/test_isas.sh [BUILD_DIR] [CTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-${EDB_BUILD_DIR:-build}}
shift || true
run="$build_dir/tools/edb-run"
[ -x "$run" ] || { echo "scripts/test_isas.sh: $run is not built" >&2; exit 2; }
suites='^(Isa|OuterProducts|Shapes/OuterProductsTest|LlvmBackend|CellKernel|CompiledCells|Differential|DifferentialCells|Gradients|SampleTraining|.*SampleModelEquality|.*CompiledBackward)\.'
widest=
for isa in avx512 avx2 generic; do
  # The probe compiles into the tests' private cache (cmake/Testing.cmake), not the user's.
  if EDB_CACHE_DIR="$build_dir/test-kernel-cache" EDB_ISA=$isa "$run" treelstm --limit 1 --repeat 1 --hidden 4 --embed 4 \
    --json >/dev/null 2>&1; then
    if [ -z "$widest" ]; then widest=$isa; continue; fi
    echo "edbatch: the differential suites under EDB_ISA=$isa (the whole suite ran under $widest)" >&2
    EDB_ISA=$isa ctest --test-dir "$build_dir" --output-on-failure -j"${EDB_JOBS:-2}" -R "$suites" "$@"
  fi
done
