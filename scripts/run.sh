#!/usr/bin/env bash
# The main job: set up and build edb-run (and only what it links) if needed, then run the TreeLSTM
# runner on a generated workload and print its results table. Extra arguments go to edb-run
# (e.g. --json, --limit 200). scripts/test.sh builds everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh edb-run
exec "${EDB_BUILD_DIR:-build}/tools/edb-run" treelstm "$@"
