#!/usr/bin/env bash
# The tests: check LAYOUT.md against the tree (check_layout.sh), set up and build if needed, run
# every ctest suite (no GPU needed; the Python module's pytest suites are the ctest test
# python.pytest, with the interpreter CMake built it for), the differential suites again under each
# narrower ISA (test_isas.sh), then install the build into a temporary prefix and build and run
# examples/consumer, a pkg-config program and the installed Python module against it. Extra
# arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check_layout.sh
scripts/setup.sh
build_dir=${EDB_BUILD_DIR:-build}
if grep -q '^EDB_PYTHON:STRING=OFF$' "$build_dir/CMakeCache.txt"; then
  echo "edbatch: EDB_PYTHON=OFF in $build_dir: no Python tests" >&2
elif ! compgen -G "$build_dir/python/edbatch*.so" >/dev/null; then
  echo "edbatch: the Python module was not built in $build_dir (Python 3 headers or pybind11 missing?)" >&2
  exit 1
fi
ctest --test-dir "$build_dir" --output-on-failure -j"${EDB_JOBS:-2}" "$@"
# The suites that compare compiled code with the reference (random graphs and cells, every sample
# model's values and gradients, the kernels themselves) again under each narrower ISA this CPU runs
# (EDB_ISA; scripts/test_isas.sh), so an AVX-512 machine also tests the AVX2 and SSE2 code.
scripts/test_isas.sh "$build_dir" "$@"
scripts/check_install.sh "$build_dir"
