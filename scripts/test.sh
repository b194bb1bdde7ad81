#!/usr/bin/env bash
# The tests: set up and build if needed, then run every ctest suite (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec ctest --test-dir "${EDB_BUILD_DIR:-build}" --output-on-failure -j"${EDB_JOBS:-2}" "$@"
