#!/usr/bin/env bash
# Issue 42's targets, from the build in build/: for each ISA this machine runs (EDB_ISA=avx512,
# avx2, generic), in ROUNDS interleaved rounds (default 3), medians:
#   - edb-bench-isa: that ISA's FMA peak (1 and 2 threads) and the weight-gradient kernel alone at
#     TreeLSTM's weight shapes (one thread), as a fraction of the peak;
#   - edb-run TreeLSTM and the BiLSTM tagger, inference (--repeat 3) and training (the second epoch
#     of --train --epochs 2), `jit` at 1 and 2 threads and `batched` at 1: instances/s, the model's
#     GFLOP/s (inference: flops per instance times instances/s; training: both passes' flops over the
#     epoch's time) against the same round's one-thread peak, jit over batched, 2 threads over 1.
# With EDB_OTHER_BUILD=DIR (another build folder, say one configured with -DEDB_NATIVE=OFF), that
# build's edb-run runs the same rows in the same rounds and each row gets this build over it.
# Usage: [EDB_OTHER_BUILD=DIR] bench/isa_matrix.sh [ROUNDS] [ISA...]
#        (numbers vary 10-40% between runs on these machines; run it quiet)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh  # $run, $data, data_of, train_data_of, field
rounds=${1:-3}
shift || true
other=${EDB_OTHER_BUILD:-}
if [ -n "$other" ]; then
  other=$(realpath "$other")
  [ -x "$other/tools/edb-run" ] || { echo "bench/isa_matrix.sh: EDB_OTHER_BUILD '$other' has no tools/edb-run" >&2; exit 2; }
fi
bench=build/bench/edb-bench-isa
for binary in "$run" "$bench"; do
  [ -x "$binary" ] || { echo "bench/isa_matrix.sh: $binary is not built (cmake --build build --target edb-run edb-bench-isa)" >&2; exit 2; }
done
isas=("$@")
if ((${#isas[@]} == 0)); then  # every ISA the engine accepts here, widest first
  for isa in avx512 avx2 generic; do
    if EDB_ISA=$isa "$run" treelstm --limit 1 --repeat 1 --hidden 4 --embed 4 --json >/dev/null 2>&1; then isas+=("$isa"); fi
  done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
builds=(this)
[ -n "$other" ] && builds+=(other)
models=(treelstm bilstm)
modes=(infer train)
configs=("jit 1" "jit 2" "batched 1")
total=$((rounds * ${#isas[@]} * (1 + ${#builds[@]} * ${#models[@]} * ${#modes[@]} * ${#configs[@]})))
done_runs=0
step() {
  done_runs=$((done_runs + 1))
  printf '\r[%d/%d] round %d %s   ' "$done_runs" "$total" "$1" "$2" >&2
}
for ((r = 0; r < rounds; ++r)); do
  for isa in "${isas[@]}"; do
    step $((r + 1)) "$isa edb-bench-isa"
    EDB_ISA=$isa "$bench" --json 2>/dev/null >"$work/peak-$isa-$r.json"
    for model in "${models[@]}"; do
      for mode in "${modes[@]}"; do
        for config in "${configs[@]}"; do
          read -r executor threads <<<"$config"
          for build in "${builds[@]}"; do
            binary=$run
            [ "$build" = other ] && binary=$other/tools/edb-run
            step $((r + 1)) "$isa $model $mode $executor --threads $threads ($build)"
            out="$work/$isa-$model-$mode-$executor-$threads-$build-$r.json"
            if [ "$mode" = train ]; then
              # shellcheck disable=SC2046
              EDB_ISA=$isa "$binary" "$model" $(train_data_of "$model") --train --epochs 2 --executor "$executor" \
                --threads "$threads" --json 2>/dev/null >"$out"
            else
              # shellcheck disable=SC2046
              EDB_ISA=$isa "$binary" "$model" $(data_of "$model") --repeat 3 --executor "$executor" \
                --threads "$threads" --json 2>/dev/null >"$out"
            fi
          done
        done
      done
    done
  done
done
printf '\n' >&2
python3 - "$work" "$rounds" "${#builds[@]}" "${isas[@]}" <<'PY'
import json, statistics, sys
work, rounds, builds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
isas = sys.argv[4:]
med = statistics.median
models, modes = ["treelstm", "bilstm"], ["infer", "train"]
configs = [("jit", 1), ("jit", 2), ("batched", 1)]
def load(isa, model, mode, executor, threads, build, r):
    """(instances/s, model GFLOP/s) of one run."""
    j = json.load(open(f"{work}/{isa}-{model}-{mode}-{executor}-{threads}-{build}-{r}.json"))
    if mode == "train":
        e = j["epochs"][-1]
        return e["instances_per_sec"], (e["forward"]["flops"] + e["backward"]["flops"]) / e["total_ms"] / 1e6
    return j["instances_per_sec"], j["flops"] / j["instances"] * j["instances_per_sec"] / 1e9
print(f"bench/isa_matrix.sh: medians of {rounds} interleaved rounds; ratios are medians of each round's ratio")
targets = []  # (what, value, target, format)
for isa in isas:
    peaks = [json.load(open(f"{work}/peak-{isa}-{r}.json")) for r in range(rounds)]
    peak1 = [p["fma_peak_gflops"]["threads_1"] for p in peaks]
    peak2 = [p["fma_peak_gflops"]["threads_2"] for p in peaks]
    cpu = json.load(open(f"{work}/{isa}-treelstm-infer-jit-1-this-0.json")).get("cpu", "?")
    print(f"\n## EDB_ISA={isa} (CPU {cpu}, weight-gradient tile {peaks[0]['tile'][0]}x{peaks[0]['tile'][1]})\n")
    print(f"FMA peak: {med(peak1):.1f} GFLOP/s on one thread, {med(peak2):.1f} on two\n")
    print("| weight gradient (one thread) | GFLOP/s | of peak |\n|---|---:|---:|")
    for i, shape in enumerate(s["shape"] for s in peaks[0]["outer_products"]):
        rate = med([p["outer_products"][i]["gflops"] for p in peaks])
        fraction = med([p["outer_products"][i]["gflops"] / peak1[r] for r, p in enumerate(peaks)])
        print(f"| {shape} | {rate:.1f} | {fraction:.0%} |")
        if shape.startswith("treelstm"):
            targets.append((f"{isa}: weight-gradient kernel at {shape}, of the peak", fraction, 0.70, "{:.0%}"))
    print("\n| model | mode | jit 1t inst/s | jit 2t | batched 1t | jit 1t GFLOP/s | of peak | jit/batched | 2t/1t |"
          + (" this/other: jit 1t | jit 2t | batched 1t |" if builds > 1 else ""))
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if builds > 1 else ""))
    for model in models:
        for mode in modes:
            runs = {(executor, threads, build): [load(isa, model, mode, executor, threads, build, r) for r in range(rounds)]
                    for executor, threads in configs for build in ["this", "other"][:builds]}
            jit1, jit2, batched1 = runs[("jit", 1, "this")], runs[("jit", 2, "this")], runs[("batched", 1, "this")]
            fraction = med([jit1[r][1] / peak1[r] for r in range(rounds)])
            over_batched = med([jit1[r][0] / batched1[r][0] for r in range(rounds)])
            scaling = med([jit2[r][0] / jit1[r][0] for r in range(rounds)])
            line = (f"| {model} | {mode} | {med([x[0] for x in jit1]):,.0f} | {med([x[0] for x in jit2]):,.0f} | "
                    f"{med([x[0] for x in batched1]):,.0f} | {med([x[1] for x in jit1]):.1f} | {fraction:.0%} | "
                    f"{over_batched:.2f} | {scaling:.2f} |")
            if model == "treelstm":
                targets.append((f"{isa}: TreeLSTM {mode}, jit's GFLOP/s of the peak", fraction, 0.40 if mode == "train" else 0.50, "{:.0%}"))
                targets.append((f"{isa}: TreeLSTM {mode}, jit over batched", over_batched, 1.8, "{:.2f}"))
            targets.append((f"{isa}: {model} {mode}, two threads over one", scaling, 1.4, "{:.2f}"))
            for executor, threads in configs[: 3 if builds > 1 else 0]:
                mine, theirs = runs[(executor, threads, "this")], runs[(executor, threads, "other")]
                ratio = med([mine[r][0] / theirs[r][0] for r in range(rounds)])
                line += f" {ratio:.2f} |"
                targets.append((f"{isa}: {model} {mode} {executor} {threads}t, EDB_OTHER_BUILD over this build", 1 / ratio,
                                1 / 1.15, "{:.2f}"))
            print(line)
print("\n## Targets\n")
for what, value, target, fmt in targets:
    print(f"- {'met' if value >= target else 'MISSED'}: {what}: {fmt.format(value)} (target {fmt.format(target)})")
print(f"\n{sum(value >= target for _, value, target, _ in targets)} of {len(targets)} targets met")
PY
