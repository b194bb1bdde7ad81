#!/usr/bin/env bash
# Issue 43's two-thread targets, from the build in build/: edb-run at --threads 1 and 2 in ROUNDS
# interleaved rounds (default 5), medians: TreeLSTM, BiLSTM and LatticeLSTM inference (jit, batch
# 64), TreeLSTM and BiLSTM training (second epoch of --train --epochs 2, on the training workloads),
# and TreeLSTM inference again while a busy loop holds one core. The TreeLSTM line also gives
# GFLOP/s against the two-core FMA peak that edb-bench-cells measures at the start of the same run. Ratios are medians of each round's ratio
# (runs of one round are seconds apart and share the machine's state). Usage:
# bench/threads_targets.sh [ROUNDS] [MODEL...]   (numbers vary 10-30% between runs on shared vCPUs)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds_and_models 5 "treelstm bilstm latticelstm treelstm-train bilstm-train treelstm-busy" "$@"
work=$(mktemp -d)
busy=
cleanup() {
  [[ -n $busy ]] && kill "$busy" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
peak=0
if [[ -x build/bench/edb-bench-cells ]]; then
  peak=$(build/bench/edb-bench-cells --json 2>/dev/null | field 'j["fma_peak_gflops"]["threads_2"]')
fi
one() {  # one() MODEL THREADS OUT
  local model=$1 threads=$2 out=$3
  case $model in
    *-train)
      # shellcheck disable=SC2046
      "$run" "${model%-train}" $(train_data_of "${model%-train}") --train --epochs 2 --threads "$threads" --json \
        2>/dev/null | field 'json.dumps(j["epochs"][-1])' >"$out" ;;
    *-busy)
      # A busy loop holding one core for the whole run (its own process, so the OS places it).
      bash -c 'while :; do :; done' &
      busy=$!
      # shellcheck disable=SC2046
      "$run" "${model%-busy}" $(data_of "${model%-busy}") --threads "$threads" --repeat 3 --json 2>/dev/null >"$out"
      kill "$busy"
      wait "$busy" 2>/dev/null || true
      busy= ;;
    *)
      # shellcheck disable=SC2046
      "$run" "$model" $(data_of "$model") --threads "$threads" --repeat 3 --json 2>/dev/null >"$out" ;;
  esac
}
total=$((rounds * ${#models[@]} * 2))
done_runs=0
for ((r = 0; r < rounds; ++r)); do
  for model in "${models[@]}"; do
    for threads in 1 2; do
      done_runs=$((done_runs + 1))
      printf '\r[%d/%d] round %d %s --threads %d   ' "$done_runs" "$total" "$((r + 1))" "$model" "$threads" >&2
      one "$model" "$threads" "$work/$model-$threads-$r.json"
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "$peak" "${models[@]}" <<'PY'
import json, statistics, sys
work, rounds, peak, models = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
# Issue 43: 1.7x on TreeLSTM and BiLSTM, inference and training; never slower elsewhere; a busy
# second core costs at most 10%.
targets = {"treelstm": 1.7, "bilstm": 1.7, "latticelstm": 1.0, "treelstm-train": 1.7, "bilstm-train": 1.7,
           "treelstm-busy": 0.9}
med = statistics.median
def run(model, threads, r):
    return json.load(open(f"{work}/{model}-{threads}-{r}.json"))
print(f"medians of {rounds} interleaved rounds (inst/s; inference runs: median of 3 passes; training: the "
      f"second epoch; ratio: median of the rounds' ratios); two-core FMA peak {peak:.1f} GFLOP/s")
print("| workload | 1 thread inst/s | 2 threads inst/s | 2 / 1 | target | 2 threads GFLOP/s | of two-core peak |")
print("|---|---:|---:|---:|---:|---:|---:|")
for m in models:
    one = [run(m, 1, r) for r in range(rounds)]
    two = [run(m, 2, r) for r in range(rounds)]
    ratio = med([b["instances_per_sec"] / a["instances_per_sec"] for a, b in zip(one, two)])
    gf = med([b.get("gflops_per_sec", 0.0) for b in two])
    share = f"{100 * gf / peak:.0f}%" if peak > 0 and gf > 0 else "-"
    print(f"| {m} | {med([a['instances_per_sec'] for a in one]):,.0f} | {med([b['instances_per_sec'] for b in two]):,.0f} | "
          f"{ratio:.2f}x | {targets.get(m, 0):.1f}x | {gf:.1f} | {share} |")
PY
