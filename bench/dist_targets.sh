#!/usr/bin/env bash
# Issue 44's targets, from the build in build/ (configured with MPI): TreeLSTM training on
# sst-learnable.txt, global batch 128 (64 per rank on 2 ranks), --epochs 3, in ROUNDS interleaved
# rounds (default 5) of: one process x 1 thread, mpirun -np 2 x 1 thread, one process x 2 threads.
# Throughput is the mean of epochs 2 and 3 (epoch 1 compiles); ratios are medians of each round's
# ratio. Also the wait for the reduction over the epochs' time, the bytes reduced per step, and the
# held-out accuracy after epoch 3 of each. Usage: bench/dist_targets.sh [ROUNDS] [BATCH]
# (with 2 ranks on a 2-core machine the target needs the machine otherwise quiet)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
rounds=${1:-5}
batch=${2:-128}
mpirun=(mpirun --oversubscribe --allow-run-as-root -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(treelstm --data "$data/sst-learnable.txt" --train --epochs 3 --batch "$batch" --json)
total=$((rounds * 3))
done_runs=0
for ((r = 0; r < rounds; ++r)); do
  for setup in one-1 ranks-2 one-2; do
    done_runs=$((done_runs + 1))
    printf '\r[%d/%d] round %d %s   ' "$done_runs" "$total" "$((r + 1))" "$setup" >&2
    case $setup in
      one-1) "$run" "${args[@]}" --threads 1 2>/dev/null >"$work/$setup-$r.json" ;;
      ranks-2) "${mpirun[@]}" "$run" "${args[@]}" --threads 1 2>/dev/null >"$work/$setup-$r.json" ;;
      one-2) "$run" "${args[@]}" --threads 2 2>/dev/null >"$work/$setup-$r.json" ;;
    esac
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "$batch" <<'PY'
import json, statistics, sys
work, rounds, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median
def load(setup, r):
    return json.load(open(f"{work}/{setup}-{r}.json"))
def rate(j):  # epochs 2 and 3: instances over their time
    e = j["epochs"][1:]
    return sum(j["train_instances"] for _ in e) / (sum(x["total_ms"] for x in e) / 1000)
runs = {s: [load(s, r) for r in range(rounds)] for s in ("one-1", "ranks-2", "one-2")}
rates = {s: [rate(j) for j in runs[s]] for s in runs}
print(f"TreeLSTM training, sst-learnable.txt, global batch {batch}; medians of {rounds} interleaved rounds "
      "(instances/s of epochs 2-3; ratios: medians of the rounds' ratios)")
print("| setup | instances/s | against 1 process x 1 thread | held-out accuracy after epoch 3 |")
print("|---|---:|---:|---:|")
names = {"one-1": "1 process x 1 thread", "ranks-2": "2 ranks x 1 thread (mpirun -np 2)", "one-2": "1 process x 2 threads"}
for s in runs:
    ratio = med([b / a for a, b in zip(rates["one-1"], rates[s])])
    acc = [j["epochs"][2]["heldout_accuracy"] for j in runs[s]]
    print(f"| {names[s]} | {med(rates[s]):,.0f} | {ratio:.2f}x | {med(acc):.4f} |")
ahead = med([b / a for a, b in zip(rates["one-2"], rates["ranks-2"])])
print(f"\n2 ranks against 1 process x 2 threads: {ahead:.2f}x (target: above 1); against 1 x 1: "
      f"{med([b / a for a, b in zip(rates['one-1'], rates['ranks-2'])]):.2f}x (target: at least 1.7x)")
d = [e["distributed"] for j in runs["ranks-2"] for e in j["epochs"][1:]]
total = [e["total_ms"] for j in runs["ranks-2"] for e in j["epochs"][1:]]
wait = med([x["reduce_wait_ms_per_step"] * x["steps"] / t for x, t in zip(d, total)])
print(f"reduction on rank 0: wait {med([x['reduce_wait_ms_per_step'] for x in d]):.2f} ms per step, "
      f"{100 * wait:.1f}% of the epoch (target: under 5%); start {med([x['reduce_start_ms_per_step'] for x in d]):.2f} ms "
      f"per step; {med([x['bytes_reduced_per_step'] for x in d]) / 1e6:.2f} MB reduced per step; "
      f"{med([j['epochs'][1]['total_ms'] / j['epochs'][1]['distributed']['steps'] for j in runs['ranks-2']]):.1f} ms per step")
acc1 = med([j["epochs"][2]["heldout_accuracy"] for j in runs["one-1"]])
acc2 = med([j["epochs"][2]["heldout_accuracy"] for j in runs["ranks-2"]])
print(f"held-out accuracy after 3 epochs: 2 ranks {acc2:.4f}, 1 process {acc1:.4f}, difference {abs(acc2 - acc1):.4f} "
      "(target: within 0.02)")
PY
