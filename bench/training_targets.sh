#!/usr/bin/env bash
# Issue 29's training targets, from the build in build/: per model, `batched` against `jit` with the
# cells' backward bodies off (calls copied back into the trace) and on (--cell-gradients on), in
# ROUNDS interleaved rounds (default 3) of `edb-run --train --epochs 2`, the second epoch measured;
# medians. Also the held-out loss of each configuration (the same to 1e-3), backward/forward, the
# share of the epoch outside schedule, plan and execute, and the first epoch's time over the second's.
# Usage: bench/training_targets.sh [ROUNDS] [MODEL...]   (numbers vary 10-30% between runs here)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 3 "treelstm bilstm" "$@"
train_data() {
  case $1 in
    treelstm) echo "--data $data/sst-learnable.txt" ;;
    bilstm) echo "--data $data/pos-like.txt --embed 128 --hidden 50" ;;
    *) echo "" ;;
  esac
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
configs=("batched off" "jit off" "jit on")
total=$((rounds * ${#models[@]} * ${#configs[@]}))
done_runs=0
for ((r = 0; r < rounds; ++r)); do
  for model in "${models[@]}"; do
    for config in "${configs[@]}"; do
      read -r executor gradients <<<"$config"
      done_runs=$((done_runs + 1))
      printf '\r[%d/%d] round %d %s %s cell-gradients %s   ' "$done_runs" "$total" "$((r + 1))" "$model" "$executor" "$gradients" >&2
      # shellcheck disable=SC2046
      "$run" "$model" $(train_data "$model") --train --epochs 2 --executor "$executor" --cell-gradients "$gradients" \
        --json 2>/dev/null >"$work/$model-$executor-$gradients-$r.json"
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "${models[@]}" <<'PY'
import json, statistics, sys
work, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
configs = [("batched", "off"), ("jit", "off"), ("jit", "on")]
def epoch(model, executor, gradients, r):
    return json.load(open(f"{work}/{model}-{executor}-{gradients}-{r}.json"))["epochs"][-1]
med = statistics.median
print(f"second epoch of `edb-run MODEL --train --epochs 2`, medians of {rounds} interleaved rounds "
      "(ratios: median of the rounds' ratios)")
def first(model, executor, gradients, r):
    return json.load(open(f"{work}/{model}-{executor}-{gradients}-{r}.json"))["epochs"][0]
def outside(e):  # the share of the epoch outside schedule, plan and execute (recording, the optimizer)
    timed = sum(e[p]["time_ms"][t] for p in ("forward", "backward") for t in ("schedule", "plan", "execute"))
    return 1 - timed / e["total_ms"]
print("| model | executor | cell gradients | inst/s | / batched | forward ms | backward ms | bwd/fwd | optimizer ms | outside | 1st/2nd epoch | held-out loss |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for model in models:
    for executor, gradients in configs:
        runs = [epoch(model, executor, gradients, r) for r in range(rounds)]
        ratio = med([epoch(model, executor, gradients, r)["instances_per_sec"] /
                     epoch(model, "batched", "off", r)["instances_per_sec"] for r in range(rounds)])
        print(f"| {model} | {executor} | {gradients} | {med([e['instances_per_sec'] for e in runs]):,.0f} | {ratio:.2f} | "
              f"{med([e['forward_ms'] for e in runs]):.0f} | {med([e['backward_ms'] for e in runs]):.0f} | "
              f"{med([e['backward_over_forward'] for e in runs]):.2f} | {med([e['optimizer_ms'] for e in runs]):.0f} | "
              f"{med([outside(e) for e in runs]):.0%} | "
              f"{med([first(model, executor, gradients, r)['total_ms'] / epoch(model, executor, gradients, r)['total_ms'] for r in range(rounds)]):.2f} | "
              f"{runs[0]['heldout_loss']:.4f} |")
PY
