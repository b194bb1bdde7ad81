#!/usr/bin/env bash
# Training throughput of another build's edb-run (OTHER, say a worktree of an earlier commit built
# with `ninja edb-run`) against this build's, with this build's `batched` as the baseline of both:
# ROUNDS interleaved rounds (default 5) of `edb-run MODEL --train --epochs 2 --json`, the second
# epoch measured, medians, and the per-round ratio of this build over OTHER. Both use the jit
# executor's defaults; held-out losses are printed so a change of arithmetic shows.
# Usage: bench/training_ab.sh OTHER_EDB_RUN [ROUNDS] [MODEL...]   (numbers vary 10-30% between runs here)
set -euo pipefail
other=${1:?usage: bench/training_ab.sh OTHER_EDB_RUN [ROUNDS] [MODEL...]}
other=$(realpath "$other")
[ -x "$other" ] || { echo "bench/training_ab.sh: '$other' is not an executable edb-run" >&2; exit 2; }
shift
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 5 "treelstm bilstm" "$@"
train_data() {
  case $1 in
    treelstm) echo "--data $data/sst-learnable.txt" ;;
    bilstm) echo "--data $data/pos-like.txt --embed 128 --hidden 50" ;;
    *) data_of "$1" ;;
  esac
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
total=$((rounds * ${#models[@]} * 3))
done_runs=0
for ((r = 0; r < rounds; ++r)); do
  for model in "${models[@]}"; do
    for config in batched other this; do
      done_runs=$((done_runs + 1))
      printf '\r[%d/%d] round %d %s %s   ' "$done_runs" "$total" "$((r + 1))" "$model" "$config" >&2
      case $config in
        batched) binary=$run executor=batched ;;
        other) binary=$other executor=jit ;;
        this) binary=$run executor=jit ;;
      esac
      # shellcheck disable=SC2046
      "$binary" "$model" $(train_data "$model") --train --epochs 2 --executor "$executor" --json 2>/dev/null \
        >"$work/$model-$config-$r.json"
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "${models[@]}" <<'PY'
import json, statistics, sys
work, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
def epoch(model, config, r, i=-1):
    return json.load(open(f"{work}/{model}-{config}-{r}.json"))["epochs"][i]
print(f"second epoch of `edb-run MODEL --train --epochs 2`, medians of {rounds} interleaved rounds")
print("| model | build | inst/s | / batched | forward ms | backward ms | bwd/fwd | optimizer ms | held-out loss |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for model in models:
    for config, name in (("batched", "this, batched"), ("other", "other, jit"), ("this", "this, jit")):
        runs = [epoch(model, config, r) for r in range(rounds)]
        ratio = med([epoch(model, config, r)["instances_per_sec"] / epoch(model, "batched", r)["instances_per_sec"]
                     for r in range(rounds)])
        print(f"| {model} | {name} | {med([e['instances_per_sec'] for e in runs]):,.0f} | {ratio:.2f} | "
              f"{med([e['forward_ms'] for e in runs]):.0f} | {med([e['backward_ms'] for e in runs]):.0f} | "
              f"{med([e['backward_over_forward'] for e in runs]):.2f} | {med([e['optimizer_ms'] for e in runs]):.0f} | "
              f"{runs[0]['heldout_loss']:.5f} |")
for model in models:
    ratios = [epoch(model, "this", r)["instances_per_sec"] / epoch(model, "other", r)["instances_per_sec"] for r in range(rounds)]
    print(f"{model}: this build over OTHER, round by round: {', '.join(f'{x:.2f}' for x in ratios)} (median {med(ratios):.2f})")
PY
