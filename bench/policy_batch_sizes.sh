#!/usr/bin/env bash
# Where batches cost (issue 32): the learned policy against greedy at batch sizes 1, 4, 16 and 64,
# from the build in build/. Per model, the learned policy is trained on the workload's first 512
# instances (batch 64, edb-run --train-policy), then edb-bench-policy-wall runs the 256 after them
# (never trained on) in one process under three engines, greedy, learned and greedy again (the
# control), one pass each per round in rotating order, ROUNDS rounds; the table gives batches / LB,
# the median of each round's throughput ratio learned / greedy, the control's (how far two runs of
# the same code differ here: these shared vCPUs vary) and the schedule stage's milliseconds per
# pass (medians over the rounds).
# Usage: bench/policy_batch_sizes.sh [ROUNDS] [MODEL...]   (default 31 rounds; every sample model
# with a learned policy's workload: the lattices, child-sum and DAG-RNN, where learned and greedy
# schedule differently, and TreeLSTM and BiLSTM, where it falls back to greedy exactly)
# DEVICE=cuda runs the passes on a GPU (--device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # also $run and $data
wall=build/bench/edb-bench-policy-wall
for tool in "$run" "$wall"; do
  [ -x "$tool" ] || { echo "policy_batch_sizes: $tool is missing; build it with scripts/setup.sh" >&2; exit 1; }
done
rounds_and_models 31 "latticelstm latticegru childsum dagrnn treelstm bilstm" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for model in "${models[@]}"; do
  echo "policy_batch_sizes: training learned on $model" >&2
  # shellcheck disable=SC2046
  "$run" "$model" $(data_of "$model") --limit 512 --policy learned --train-policy "$work/$model.policy" \
    --repeat 1 --json >/dev/null 2>"$work/train.err" || { cat "$work/train.err" >&2; exit 1; }
  echo "### $model"
  echo
  # shellcheck disable=SC2046
  "$wall" --model "$model" $(data_of "$model") --skip 512 --limit 256 --batches 1,4,16,64 --rounds "$rounds" \
    --policy-file "$work/$model.policy" --device "${DEVICE:-cpu}"
  echo
done
