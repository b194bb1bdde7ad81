#!/usr/bin/env bash
# Resident memory per training epoch (issue 31's soak): trains MODEL for EPOCHS epochs with
# edb-run --train --json from the build in build/ and prints each epoch's resident MiB, then the
# ratio of the last epoch's to the fifth's (the target: at most 1.1), and the engine's caches
# (Stats::caches) after the last epoch. Extra arguments go to
# edb-run (e.g. --executor batched, --cells off, --threads 2). Usage:
# bench/memory_per_epoch.sh [EPOCHS] [MODEL] [DATA] [edb-run flags...]
#   defaults: 100 treelstm ../shared/data/sst-learnable.txt
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-100}
model=${2:-treelstm}
data=${3:-../shared/data/sst-learnable.txt}
shift 3 2>/dev/null || shift $#
run=build/tools/edb-run
[ -x "$run" ] || { echo "memory_per_epoch: $run is missing; build it with scripts/setup.sh edb-run" >&2; exit 1; }
[ -r "$data" ] || { echo "memory_per_epoch: cannot read the data file '$data'" >&2; exit 1; }
python=$(command -v python3) || { echo "memory_per_epoch: python3 is needed to read edb-run's JSON" >&2; exit 1; }
echo "memory_per_epoch: $model on $data, $epochs epochs, flags: ${*:-none}" >&2
"$run" "$model" --data "$data" --train --epochs "$epochs" --json "$@" | "$python" -c '
import json, sys
epochs = json.load(sys.stdin)["epochs"]
print("| epoch | resident MiB | train loss |")
print("| ---: | ---: | ---: |")
for e in epochs:
    print("| %d | %.1f | %.4f |" % (e["epoch"], e["resident_mb"], e["train_loss"]))
if len(epochs) >= 5:
    fifth, last = epochs[4]["resident_mb"], epochs[-1]["resident_mb"]
    print("\nresident after epoch %d: %.1f MiB, after epoch 5: %.1f MiB, ratio %.3f" % (epochs[-1]["epoch"], last, fifth, last / fifth))
caches = epochs[-1].get("caches", {})
if caches:
    print("\ncaches after epoch %d (entries/bound, evictions so far):" % epochs[-1]["epoch"])
    for name, c in caches.items():
        if c["entries"] or c["bytes"] or c["evictions"]:
            bound = "/%d" % c["max_entries"] if c["max_entries"] else ""
            size = ", %.1f MiB" % (c["bytes"] / 1048576.0) if c["bytes"] else ""
            print("  %s: %d%s%s, %d evicted" % (name, c["entries"], bound, size, c["evictions"]))
'
