#!/usr/bin/env python3
# How loose LB is on the lattice models (issue 32): a plain char cell and a merging one are
# different types, so a schedule's char batches form a common supersequence of every lattice's
# plain/merging string (P/M per char), while LB counts only the longest P and the longest M chain.
# Per trace of BATCH lattices from FIRST on: LB's char batches, the longest pairwise shortest
# common supersequence (a lower bound on any schedule's char batches) and a weighted majority merge
# of all the strings (an upper bound on the fewest). Usage: bench/lattice_char_bound.py
# [DATA (../shared/data/lattice-like.jsonl)] [FIRST (512)] [TRACES (4)] [BATCH (64)]
import itertools
import json
import sys


def kinds(lattice):
    incoming = [0] * len(lattice["chars"])
    for _, end, _ in lattice["words"]:
        incoming[end] += 1
    return "".join("M" if n else "P" for n in incoming)


def shortest_common_supersequence(a, b):
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            current[j] = previous[j - 1] + 1 if a[i - 1] == b[j - 1] else min(previous[j], current[j - 1]) + 1
        previous = current
    return previous[-1]


def majority_merge(strings):
    at, length = [0] * len(strings), 0
    while any(p < len(s) for p, s in zip(at, strings)):
        weight = {}
        for p, s in zip(at, strings):
            if p < len(s):
                weight[s[p]] = weight.get(s[p], 0) + len(s) - p
        letter = max(sorted(weight), key=weight.get)
        at = [p + 1 if p < len(s) and s[p] == letter else p for p, s in zip(at, strings)]
        length += 1
    return length


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/lattice-like.jsonl"
    first, traces, batch = (int(a) for a in (sys.argv[2:5] + ["512", "4", "64"][len(sys.argv[2:5]):]))
    lattices = [json.loads(line) for line in open(path)]
    print("| trace | LB's char batches | pairwise SCS (lower bound) | majority merge (upper bound) |")
    print("|---|---:|---:|---:|")
    totals = [0, 0, 0]
    for t in range(traces):
        strings = [kinds(l) for l in lattices[first + t * batch:first + (t + 1) * batch]]
        row = [max(s.count("P") for s in strings) + max(s.count("M") for s in strings),
               max(shortest_common_supersequence(a, b) for a, b in itertools.combinations(strings, 2)),
               majority_merge(strings)]
        totals = [x + y for x, y in zip(totals, row)]
        print("| %d | %d | %d | %d |" % (t, *row))
    print("| all | %d | %d | %d |" % tuple(totals))


main()
