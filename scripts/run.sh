#!/usr/bin/env bash
# The main job: set up and build if needed, then run the TreeLSTM runner on a generated workload
# and print its results table. Extra arguments go to edb-run (e.g. --json, --limit 200).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${EDB_BUILD_DIR:-build}/tools/edb-run" treelstm "$@"
