#!/usr/bin/env bash
# The learned policy's targets (issue #4) on the shared data, from the build in build/:
#   1. batches / LB for depth, agenda, greedy and a trained fsm, cells on and off;
#   2. lattice throughput, trained fsm against agenda, alternating runs, best of 4.
# Usage: bench/policy_targets.sh   (takes a few minutes; numbers vary 10-30% between runs here)
set -euo pipefail
cd "$(dirname "$0")/.."
run=build/tools/edb-run
data=../shared/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data_of() { case $1 in tree*) echo sst-like.txt ;; bilstm) echo pos-like.txt ;; *) echo lattice-like.jsonl ;; esac; }
field() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

echo "| model | cells | depth | agenda | greedy | fsm (trained) |"
echo "|---|---|---|---|---|---|"
for cells in on off; do
  for model in treelstm bilstm latticelstm latticegru; do
    row="| $model | $cells |"
    for policy in depth agenda greedy fsm; do
      extra=()
      [ "$policy" = fsm ] && extra=(--train-policy "$work/$model-$cells.policy")
      ratio=$("$run" "$model" --data "$data/$(data_of $model)" --policy "$policy" --cells "$cells" "${extra[@]}" \
                --repeat 1 --json 2>/dev/null | field "'%.3f' % j['batches_per_lower_bound']")
      row="$row $ratio |"
    done
    echo "$row"
  done
done

echo
echo "| model | cells | agenda inst/s | fsm inst/s | fsm / agenda |"
echo "|---|---|---|---|---|"
for model in latticelstm latticegru; do
  for cells in off on; do
    best_agenda=0 best_fsm=0
    for round in 1 2 3 4; do
      a=$("$run" "$model" --data "$data/lattice-like.jsonl" --policy agenda --cells "$cells" --repeat 3 --json 2>/dev/null |
          field "round(j['instances_per_sec'])")
      f=$("$run" "$model" --data "$data/lattice-like.jsonl" --policy fsm --cells "$cells" \
            --policy-file "$work/$model-$cells.policy" --repeat 3 --json 2>/dev/null | field "round(j['instances_per_sec'])")
      ((a > best_agenda)) && best_agenda=$a
      ((f > best_fsm)) && best_fsm=$f
    done
    echo "| $model | $cells | $best_agenda | $best_fsm | $(python3 -c "print('%.2fx' % ($best_fsm / $best_agenda))") |"
  done
done
