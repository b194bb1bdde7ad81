#!/usr/bin/env bash
# Issue 47's batching target, from the build in build/: the parser decoding from its own predictions
# (edb-run parser --decode, jit, greedy) at --batch 64, its programs run together, against the same
# programs run one instance at a time (--one-at-a-time: reading values instance by instance), in
# ROUNDS interleaved rounds (default 5), medians of each round's ratio; target 10x. Also the parser
# on gold transitions (the static inference loop), for the 1.5x-of-static target. Usage:
# bench/decode_targets.sh [ROUNDS] [EXTRA EDB-RUN FLAGS...]   (e.g. --load parser.model --limit 512)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # $run, field
rounds=${1:-5}
shift || true
extra=("$@")
[[ " ${extra[*]} " == *" --limit "* ]] || extra+=(--limit 1024)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((r = 0; r < rounds; ++r)); do
  printf '\rround %d/%d   ' "$((r + 1))" "$rounds" >&2
  "$run" parser --decode --batch 64 --repeat 3 --json "${extra[@]}" 2>/dev/null >"$work/together-$r.json"
  "$run" parser --decode --one-at-a-time --batch 64 --repeat 3 --json "${extra[@]}" 2>/dev/null >"$work/alone-$r.json"
  "$run" parser --batch 64 --repeat 3 --json "${extra[@]}" 2>/dev/null >"$work/gold-$r.json"
done
printf '\n' >&2
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
load = lambda kind, r: json.load(open(f"{work}/{kind}-{r}.json"))
med = statistics.median
together = [load("together", r) for r in range(rounds)]
alone = [load("alone", r) for r in range(rounds)]
gold = [load("gold", r) for r in range(rounds)]
ratio = med(t["instances_per_sec"] / a["instances_per_sec"] for t, a in zip(together, alone))
static = med(g["instances_per_sec"] / t["instances_per_sec"] for g, t in zip(gold, together))
t0, a0 = together[0], alone[0]
print(f"parser --decode, batch 64, {t0['instances']} sentences, {rounds} rounds (medians):")
print(f"  together:       {med(t['instances_per_sec'] for t in together):10.1f} instances/s, "
      f"{t0['rounds_per_pass']:.0f} rounds per pass, {t0['batches'] / t0['repeat']:.0f} batches per pass "
      f"(lower bound {t0['lower_bound'] / t0['repeat']:.0f}), heads {t0['accuracy']:.4f}")
print(f"  one at a time:  {med(a['instances_per_sec'] for a in alone):10.1f} instances/s, "
      f"{a0['rounds_per_pass']:.0f} rounds per pass, heads {a0['accuracy']:.4f}")
print(f"  gold (static):  {med(g['instances_per_sec'] for g in gold):10.1f} instances/s")
print(f"  together / one at a time: {ratio:.2f}x (target >= 10x)")
print(f"  static / together:        {static:.2f}x (target <= 1.5x)")
PY
