#!/usr/bin/env bash
# What batching buys on this machine: set up and build edb-bench if needed, then run the benchmark
# suite (edb-bench) with its defaults, about 10 minutes on 2 cores. Extra arguments go to edb-bench
# (e.g. --models treelstm --limit 64, --out DIR, --json FILE; see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh edb-bench
exec "${EDB_BUILD_DIR:-build}/bench/edb-bench" "$@"
