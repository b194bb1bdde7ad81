#!/usr/bin/env bash
# Where batches cost (issue 32): the learned policy against greedy at batch sizes 1, 4, 16 and 64,
# from the build in build/. Per model, the learned policy is trained on the workload's first 512
# instances (batch 64), then both policies run the instances after them (never trained on) at
# each batch size, in ROUNDS interleaved rounds of REPEAT passes each (edb-run reports the median
# pass); the table gives batches / LB, the median of each round's throughput ratio learned / greedy
# (these shared vCPUs vary 10-40% between runs) and, from the last round, the schedule stage's
# milliseconds (edb-run's time_ms.schedule) under each.
# Usage: [REPEAT=3] bench/policy_batch_sizes.sh [ROUNDS] [MODEL...]   (default 3 rounds; the
# lattice, child-sum and DAG-RNN models, where learned and greedy schedule differently)
set -euo pipefail
cd "$(dirname "$0")/.."
run=build/tools/edb-run
data=../shared/data
[ -x "$run" ] || { echo "policy_batch_sizes: $run is missing; build it with scripts/setup.sh edb-run" >&2; exit 1; }
rounds=${1:-3}
repeat=${REPEAT:-3}
shift || true
models=("$@")
((${#models[@]})) || models=(latticelstm latticegru childsum dagrnn)
source bench/workloads.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| model | batch | greedy batches/LB | learned batches/LB | learned / greedy throughput (median of $rounds) | schedule ms, greedy / learned |"
echo "|---|---:|---:|---:|---:|---:|"
for model in "${models[@]}"; do
  echo "policy_batch_sizes: training learned on $model" >&2
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --limit 512 --policy learned --train-policy "$work/$model.policy" \
    --repeat 1 --json >/dev/null 2>"$work/train.err" || { cat "$work/train.err" >&2; exit 1; }
  for batch in 1 4 16 64; do
    ratios=()
    for ((r = 0; r < rounds; ++r)); do
      # shellcheck disable=SC2046
      "$run" "$model" $(data_of "$model") --skip 512 --limit 256 --batch "$batch" --policy greedy --repeat "$repeat" \
        --json 2>/dev/null >"$work/g.json"
      # shellcheck disable=SC2046
      "$run" "$model" $(data_of "$model") --skip 512 --limit 256 --batch "$batch" --policy learned \
        --policy-file "$work/$model.policy" --repeat "$repeat" --json 2>/dev/null >"$work/l.json"
      g=$(field "j['instances_per_sec']" <"$work/g.json")
      l=$(field "j['instances_per_sec']" <"$work/l.json")
      ratios+=("$(python3 -c "print($l / $g)")")
    done
    gr=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/g.json")
    lr=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/l.json")
    median=$(IFS=,; python3 -c "import statistics; print('%.2fx' % statistics.median([${ratios[*]}]))")
    gs=$(field "'%.2f' % j['time_ms']['schedule']" <"$work/g.json")
    ls=$(field "'%.2f' % j['time_ms']['schedule']" <"$work/l.json")
    echo "| $model | $batch | $gr | $lr | $median | $gs / $ls |"
  done
done
