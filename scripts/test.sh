#!/usr/bin/env bash
# The tests: set up and build if needed, run every ctest suite (no GPU needed), then install the
# build into a temporary prefix and build and run examples/consumer and a pkg-config program
# against it. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${EDB_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j"${EDB_JOBS:-2}" "$@"
scripts/check_install.sh "$build_dir"
