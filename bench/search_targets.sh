#!/usr/bin/env bash
# Issue 19's targets for the learned policy, from the build in build/: per model, learn the policy
# ("learned") from the workload's first 8 traces of 64, then on the instances after them (never
# trained on) compare greedy and learned: batches / LB, and throughput in alternating runs (best
# of 3 rounds). Then edb-bench-search on the lattice models: the search itself and the cost of a
# decision. Usage: bench/search_targets.sh [MODEL...]   (numbers vary 10-30% between runs here)
set -euo pipefail
cd "$(dirname "$0")/.."
run=build/tools/edb-run
data=../shared/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=("$@")
((${#models[@]})) || models=(latticelstm latticegru childsum dagrnn treelstm bilstm)
source bench/workloads.sh

echo "| model | greedy batches/LB | learned batches/LB | learned vs greedy batches | greedy inst/s | learned inst/s | learned / greedy | policy unseen | training |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in "${models[@]}"; do
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --limit 512 --policy learned --train-policy "$work/$model.policy" \
    --repeat 1 --json 2>/dev/null >"$work/$model-train.json"
  training=$(field "j['training']['stop_reason'][:60]" <"$work/$model-train.json")
  best_g=0 best_l=0
  for round in 1 2 3; do
    # shellcheck disable=SC2046
    "$run" "$model" $(data_of "$model") --skip 512 --policy greedy --repeat 3 --json 2>/dev/null >"$work/g.json"
    # shellcheck disable=SC2046
    "$run" "$model" $(data_of "$model") --skip 512 --policy learned --policy-file "$work/$model.policy" \
      --repeat 3 --json 2>/dev/null >"$work/l.json"
    g=$(field "round(j['instances_per_sec'])" <"$work/g.json")
    l=$(field "round(j['instances_per_sec'])" <"$work/l.json")
    ((g > best_g)) && best_g=$g
    ((l > best_l)) && best_l=$l
  done
  gr=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/g.json")
  lr=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/l.json")
  unseen=$(field "'%.1f%%' % (100 * j.get('policy_unseen_rate', 0))" <"$work/l.json")
  cut=$(python3 -c "print('%+.1f%%' % (100 * ($lr / $gr - 1)))")
  echo "| $model | $gr | $lr | $cut | $best_g | $best_l | $(python3 -c "print('%.2fx' % ($best_l / $best_g))") | $unseen | $training |"
done

echo
for model in latticelstm latticegru; do
  build/bench/edb-bench-search --model "$model" --data "$data/lattice-like.jsonl" --train-traces 8 --test-traces 4 2>/dev/null
  echo
done
