#!/usr/bin/env bash
# Issue 16's end-to-end targets, from the build in build/: per model, `jit` against `batched`
# (cells on, batch 64, one thread, greedy), and `jit` with --memplan on against off, in ROUNDS
# interleaved rounds (default 5), medians. GFLOP/s is the jit's model arithmetic over its median
# pass; compare it with edb-bench-cells' FMA peak from the same session. Usage:
# bench/cells_targets.sh [ROUNDS] [MODEL...]   (numbers vary 10-30% between runs here)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 5 "treelstm bilstm latticelstm treegru latticegru mvrnn childsum dagrnn" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
configs=("batched off" "jit off" "jit on")
for ((r = 0; r < rounds; ++r)); do
  for model in "${models[@]}"; do
    for config in "${configs[@]}"; do
      read -r executor memplan <<<"$config"
      # shellcheck disable=SC2046
      "$run" "$model" $(data_of "$model") --executor "$executor" --memplan "$memplan" --repeat 3 --json \
        2>/dev/null >"$work/$model-$executor-$memplan-$r.json"
    done
  done
done
python3 - "$work" "$rounds" "${models[@]}" <<'EOF'
import json, statistics, sys
work, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def runs(model, executor, memplan):
    return [json.load(open(f"{work}/{model}-{executor}-{memplan}-{r}.json")) for r in range(rounds)]
def med(values):
    return statistics.median(values)
# The ratios are medians of each round's ratio: runs of one round are seconds apart, so they
# share the machine's state (these shared vCPUs switch between a fast and a slow mode).
print(f"medians of {rounds} interleaved rounds (inst/s; each run: median of 3 passes; ratios: median of the rounds' ratios)")
print("| model | batched inst/s | jit inst/s | jit / batched | jit GFLOP/s | jit memplan on inst/s | on / off | jit time: trace, schedule, plan, execute (ms per pass) |")
print("|---|---|---|---|---|---|---|---|")
for m in models:
    b, j, jon = runs(m, "batched", "off"), runs(m, "jit", "off"), runs(m, "jit", "on")
    bi, ji, joni = (med([x["instances_per_sec"] for x in rs]) for rs in (b, j, jon))
    speedup = med([y["instances_per_sec"] / x["instances_per_sec"] for x, y in zip(b, j)])
    memplan = med([y["instances_per_sec"] / x["instances_per_sec"] for x, y in zip(j, jon)])
    gf = med([x["gflops_per_sec"] for x in j])
    passes = j[0]["repeat"]
    t = {k: med([x["time_ms"][k] for x in j]) / passes for k in ("trace", "schedule", "plan", "execute")}
    print(f"| {m} | {bi:.0f} | {ji:.0f} | {speedup:.2f}x | {gf:.1f} | {joni:.0f} | {memplan:.2f}x | "
          f"{t['trace']:.1f}, {t['schedule']:.1f}, {t['plan']:.1f}, {t['execute']:.1f} |")
EOF
