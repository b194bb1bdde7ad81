#!/usr/bin/env bash
# Independent batches side by side (runtime/side_by_side.h) against every batch alone, from the
# build in build/: edb-run at --threads 2 with EDB_SIDE_BY_SIDE=0 and =1 in ROUNDS interleaved
# rounds (default 5), medians: inference (jit, batch 64, median of 3 passes) of each model, and
# training (second epoch of --train --epochs 2) where MODEL-train is named. Also the batches that
# ran side by side per pass. Ratios are medians of each round's ratio. Usage:
# bench/side_by_side.sh [ROUNDS] [MODEL...]   (numbers vary 10-30% between runs on shared vCPUs)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 5 "treelstm bilstm latticelstm treegru latticegru mvrnn childsum dagrnn treelstm-train bilstm-train" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
one() {  # one() MODEL SIDE_BY_SIDE OUT
  local model=$1 side=$2 out=$3
  case $model in
    *-train)
      # shellcheck disable=SC2046
      EDB_SIDE_BY_SIDE=$side "$run" "${model%-train}" $(train_data_of "${model%-train}") --train --epochs 2 --threads 2 \
        --json 2>/dev/null | field 'json.dumps(j["epochs"][-1])' >"$out" ;;
    *)
      # shellcheck disable=SC2046
      EDB_SIDE_BY_SIDE=$side "$run" "$model" $(data_of "$model") --threads 2 --repeat 3 --json 2>/dev/null >"$out" ;;
  esac
}
total=$((rounds * ${#models[@]} * 2))
done_runs=0
for ((r = 0; r < rounds; ++r)); do
  for model in "${models[@]}"; do
    for side in 0 1; do
      done_runs=$((done_runs + 1))
      printf '\r[%d/%d] round %d %s EDB_SIDE_BY_SIDE=%d   ' "$done_runs" "$total" "$((r + 1))" "$model" "$side" >&2
      one "$model" "$side" "$work/$model-$side-$r.json"
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "${models[@]}" <<'PY'
import json, statistics, sys
work, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
def run(model, side, r):
    return json.load(open(f"{work}/{model}-{side}-{r}.json"))
def side_by_side(j):  # batches run side by side, wherever the report keeps the counter
    if isinstance(j, dict):
        if "side_by_side_batches" in j: return j["side_by_side_batches"]
        for v in j.values():
            found = side_by_side(v)
            if found is not None: return found
    return None
print(f"--threads 2, medians of {rounds} interleaved rounds (inst/s; inference: median of 3 passes; training: "
      "the second epoch; ratio: median of the rounds' ratios)")
print("| workload | alone inst/s | side by side inst/s | side by side / alone | batches side by side |")
print("|---|---:|---:|---:|---:|")
for m in models:
    off = [run(m, 0, r) for r in range(rounds)]
    on = [run(m, 1, r) for r in range(rounds)]
    ratio = med([b["instances_per_sec"] / a["instances_per_sec"] for a, b in zip(off, on)])
    print(f"| {m} | {med([a['instances_per_sec'] for a in off]):,.0f} | {med([b['instances_per_sec'] for b in on]):,.0f} | "
          f"{ratio:.2f}x | {side_by_side(on[0])} |")
PY
