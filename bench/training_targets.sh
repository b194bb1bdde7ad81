#!/usr/bin/env bash
# The training targets (issues 29 and 43), from the build in build/: per model, `batched` against
# `jit` (each cell call one node forward and backward, under jit one compiled kernel per batch of
# calls), in ROUNDS interleaved rounds (default 3) of `edb-run --train --epochs 2`, the second epoch measured;
# medians. Also the held-out loss of each configuration (the same to 1e-3), backward/forward, the
# share of the epoch outside schedule, plan and execute, the milliseconds a step spends recording its
# backward pass (issue 43: at most 0.3 for TreeLSTM), the first epoch's time over the second's, and
# the model's GFLOP/s (both passes' flops over the epoch's time) against the one-thread FMA peak
# that build/bench/edb-bench-cells measures at the start of the same round (on these 2-vCPU
# machines a busy sibling thread halves it, so the fraction holds only for a quiet machine).
# With EDB_OTHER_RUN set to another build's edb-run (say a worktree of an earlier commit built with
# `ninja edb-run`), that build runs `jit` with its defaults in the same rounds, and the per-round
# ratio of this build over it is printed.
# Usage: [EDB_OTHER_RUN=EDB_RUN] bench/training_targets.sh [ROUNDS] [MODEL...]
#        (numbers vary 10-30% between runs here)
set -euo pipefail
other=${EDB_OTHER_RUN:-}
if [ -n "$other" ]; then
  other=$(realpath "$other")
  [ -x "$other" ] || { echo "bench/training_targets.sh: EDB_OTHER_RUN '$other' is not an executable edb-run" >&2; exit 2; }
fi
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 3 "treelstm bilstm" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
configs=("this batched" "this jit")  # build, executor
[ -n "$other" ] && configs+=("other jit")
total=$((rounds * ${#models[@]} * ${#configs[@]}))
done_runs=0
cells_bench=build/bench/edb-bench-cells
[ -x "$cells_bench" ] || { echo "bench/training_targets.sh: $cells_bench is not built (ninja -C build edb-bench-cells)" >&2; exit 2; }
for ((r = 0; r < rounds; ++r)); do
  "$cells_bench" --calls 1 --json 2>/dev/null >"$work/peak-$r.json"
  for model in "${models[@]}"; do
    for config in "${configs[@]}"; do
      read -r build executor <<<"$config"
      binary=$run
      [ "$build" = other ] && binary=$other
      done_runs=$((done_runs + 1))
      printf '\r[%d/%d] round %d %s %s %s   ' "$done_runs" "$total" "$((r + 1))" "$model" "$build" "$executor" >&2
      # shellcheck disable=SC2046
      "$binary" "$model" $(train_data_of "$model") --train --epochs 2 --executor "$executor" \
        --json 2>/dev/null >"$work/$model-$build-$executor-$r.json"
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "${#configs[@]}" "${configs[@]}" "${models[@]}" <<'PY'
import json, statistics, sys
work, rounds, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
configs = [tuple(c.split()) for c in sys.argv[4:4 + count]]
models = sys.argv[4 + count:]
def epoch(model, config, r, which=-1):
    build, executor = config
    return json.load(open(f"{work}/{model}-{build}-{executor}-{r}.json"))["epochs"][which]
med = statistics.median
print(f"second epoch of `edb-run MODEL --train --epochs 2`, medians of {rounds} interleaved rounds "
      "(ratios: median of the rounds' ratios)")
peaks = [json.load(open(f"{work}/peak-{r}.json"))["fma_peak_gflops"]["threads_1"] for r in range(rounds)]
def gflops(e):  # the model's arithmetic over the epoch's time
    return (e["forward"]["flops"] + e["backward"]["flops"]) / e["total_ms"] / 1e6
print(f"one-thread FMA peak per round (edb-bench-cells): {', '.join(f'{p:.0f}' for p in peaks)} GFLOP/s")
def outside(e):  # the share of the epoch outside schedule, plan and execute (recording, the optimizer)
    timed = sum(e[p]["time_ms"][t] for p in ("forward", "backward") for t in ("schedule", "plan", "execute"))
    return 1 - timed / e["total_ms"]
def record_backward(e):  # ms a step recording the backward pass (Trace::record_backward's own work)
    return e["backward"]["time_ms"].get("record_backward", float("nan")) / max(len(e["step_losses"]), 1)
print("| model | executor | inst/s | / batched | forward ms | backward ms | bwd/fwd | optimizer ms | outside | bwd recording ms/step | GFLOP/s | of peak | 1st/2nd epoch | held-out loss |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
baseline = ("this", "batched")
for model in models:
    for config in configs:
        build, executor = config
        runs = [epoch(model, config, r) for r in range(rounds)]
        ratio = med([epoch(model, config, r)["instances_per_sec"] / epoch(model, baseline, r)["instances_per_sec"]
                     for r in range(rounds)])
        name = executor if build == "this" else f"{executor} (EDB_OTHER_RUN)"
        print(f"| {model} | {name} | {med([e['instances_per_sec'] for e in runs]):,.0f} | {ratio:.2f} | "
              f"{med([e['forward_ms'] for e in runs]):.0f} | {med([e['backward_ms'] for e in runs]):.0f} | "
              f"{med([e['backward_over_forward'] for e in runs]):.2f} | {med([e['optimizer_ms'] for e in runs]):.0f} | "
              f"{med([outside(e) for e in runs]):.0%} | {med([record_backward(e) for e in runs]):.2f} | "
              f"{med([gflops(e) for e in runs]):.0f} | "
              f"{med([gflops(e) / peaks[r] for r, e in enumerate(runs)]):.0%} | "
              f"{med([epoch(model, config, r, 0)['total_ms'] / epoch(model, config, r)['total_ms'] for r in range(rounds)]):.2f} | "
              f"{runs[0]['heldout_loss']:.4f} |")
if ("other", "jit") in configs:
    for model in models:
        ratios = [epoch(model, ("this", "jit"), r)["instances_per_sec"] /
                  epoch(model, ("other", "jit"), r)["instances_per_sec"] for r in range(rounds)]
        print(f"{model}: jit, this build over EDB_OTHER_RUN, round by round: "
              f"{', '.join(f'{x:.2f}' for x in ratios)} (median {med(ratios):.2f})")
PY
