#!/usr/bin/env bash
# Issue 32's batch and cost targets for the learned policy, from the build in build/, in one run:
#   1. per model, trained on the workload's first 512 instances (batch 64, cells on), batches / LB
#      of greedy and learned on the 256 after them (never trained on), and what training kept (the
#      base rule, from the policy file, and the scores);
#   2. per model where learned and greedy differ, edb-bench-search on 4 untrained traces: the
#      tight-first rule, the learned table and the search that teaches it against the lower bound,
#      and the cost per decision beyond greedy's all told (the analysis it reads and its schedule
#      against greedy's), with the analysis's part, and the analysis's chain pass alone each way
#      (greedy's ranks, the learned policy's heights).
# Wall clock is bench/policy_batch_sizes.sh's. Usage: bench/learned_targets.sh [MODEL...]
set -euo pipefail
cd "$(dirname "$0")/.."
run=build/tools/edb-run
search=build/bench/edb-bench-search
data=../shared/data
for tool in "$run" "$search"; do
  [ -x "$tool" ] || { echo "learned_targets: $tool is missing; build it with scripts/setup.sh" >&2; exit 1; }
done
models=("$@")
((${#models[@]})) || models=(latticelstm latticegru childsum dagrnn treelstm bilstm)
source bench/workloads.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| model | greedy batches/LB | learned batches/LB | learned vs greedy | greedy fallback | base | scores kept |"
echo "|---|---:|---:|---:|---|---|---:|"
for model in "${models[@]}"; do
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --limit 512 --policy learned --train-policy "$work/$model.policy" \
    --repeat 1 --json 2>/dev/null >"$work/train.json"
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --skip 512 --limit 256 --policy greedy --repeat 1 --json 2>/dev/null >"$work/g.json"
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --skip 512 --limit 256 --policy learned --policy-file "$work/$model.policy" \
    --repeat 1 --json 2>/dev/null >"$work/l.json"
  g=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/g.json")
  l=$(field "'%.3f' % j['batches_per_lower_bound']" <"$work/l.json")
  fallback=$(field "'yes' if j['training']['greedy_fallback'] else 'no'" <"$work/train.json")
  kept=$(field "j['training']['states']" <"$work/train.json")
  base=$(field "j['content']['base']" <"$work/$model.policy")
  echo "| $model | $g | $l | $(python3 -c "print('%+.1f%%' % (100 * ($l / $g - 1)))") | $fallback | $base | $kept |"
done

echo
echo "| model (batches / LB) | greedy | tight-first | learned | search | learned ns/decision | of which its analysis | chain pass ns/decision, ranks / heights |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for model in "${models[@]}"; do
  case $model in treelstm | bilstm) continue ;; esac  # greedy meets LB there: learned is greedy
  # shellcheck disable=SC2046
  "$search" --model "$model" $(data_of "$model") --train-traces 8 --test-traces 4 --rounds 100 \
    --json "$work/search.json" >/dev/null 2>&1
  row=$(python3 - "$work/search.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
lb = max(j["weighted_lower_bound"], 1)
cells = ["%.3f" % (j[k] / lb) for k in ("greedy", "tight_first", "learned", "search")]
print(" | ".join(cells) + " | %.0f | %.0f | %.0f / %.0f" % (j["learned_ns_per_decision"], j["analysis_ns_per_decision"],
                                                    j["ranks_pass_ns_per_decision"], j["heights_pass_ns_per_decision"]))
EOF
)
  echo "| $model | $row |"
done
