#!/usr/bin/env python3
"""What Python costs, in one run (issue #20's targets):

1. The Python TreeLSTM (python/examples/treelstm.py) against the C++ sample (edb-run treelstm) on
   the same data, batch 64, one thread, the default executor: median instances/s of each over
   --rounds interleaved rounds (each round is edb-run's measurement: a warm-up pass, then the
   median of --repeat passes), and their ratio (target: at least 0.75).
2. Python's overhead per recorded cell call: N calls of the TreeLSTM's leaf and internal cells
   recorded by a Python loop, against the same N calls recorded by a C++ loop inside the module
   (edbatch._record_calls), on traces of the same engine; (Python - C++) / N, median over rounds
   (target: at most 0.5 us). Both sides record the same nodes; only the Python loop, the call
   through the binding and the returned Expr objects differ.

    PYTHONPATH=build/python python3 python/bench/bench_python.py [--rounds 5] [--json]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import edbatch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
import treelstm  # noqa: E402  (the example, imported as a module)


def cpp_rate(edb_run, data, batch, repeat):
    out = subprocess.run([str(edb_run), "treelstm", "--data", str(data), "--batch", str(batch), "--threads", "1",
                          "--repeat", str(repeat), "--json"], check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    return report["instances_per_sec"], report["loss"], report["executor"]


def python_rate(data, batch, repeat):
    args = argparse.Namespace(data=str(data), batch=batch, repeat=repeat, embed=128, hidden=128, json=True)
    engine = edbatch.Engine(threads=1)
    sample = treelstm.TreeLstm(treelstm.read_trees(str(data), -1), 128, 128, 1)
    report = treelstm.infer(sample, engine, args)
    return report["instances_per_sec"], report["loss"], report["executor"]


def cell_overhead(calls):
    """Seconds per call: (Python loop, C++ loop) for the leaf and the internal cell."""
    trees = [[(2, -1, -1, "a"), (2, -1, -1, "b"), (3, 0, 1, "")]]
    sample = treelstm.TreeLstm(trees, 128, 128, 1)
    engine = edbatch.Engine(threads=1)
    results = {}
    for name in ("leaf", "internal"):
        cell = getattr(sample, name)
        # A warm-up trace first: trace states are pooled, so both measured traces start with
        # the capacity it left (otherwise the first pays for growing the graph and arena).
        for _ in range(2):
            with edbatch.Trace(engine) as t:
                x = t.lookup(sample.E, 1)
                h, c = sample.leaf(t, x)
                args = [x] if name == "leaf" else [h, c, h, c]
                edbatch._record_calls(cell, t, args, calls)
        with edbatch.Trace(engine) as t:
            x = t.lookup(sample.E, 1)
            h, c = sample.leaf(t, x)
            args = [x] if name == "leaf" else [h, c, h, c]
            cell(t, *args)  # the body is recorded on the first call
            start = time.perf_counter()
            for _ in range(calls):
                cell(t, *args)
            python = (time.perf_counter() - start) / calls
        with edbatch.Trace(engine) as t:
            x = t.lookup(sample.E, 1)
            h, c = sample.leaf(t, x)
            args = [x] if name == "leaf" else [h, c, h, c]
            cell(t, *args)
            cpp = edbatch._record_calls(cell, t, args, calls) / calls
        results[name] = (python, cpp)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_data = HERE.parents[1].parent / "shared" / "data" / "sst-like.txt"
    default_run = pathlib.Path(edbatch.__file__).resolve().parent.parent / "tools" / "edb-run"
    parser.add_argument("--data", default=str(default_data))
    parser.add_argument("--edb-run", default=os.environ.get("EDB_RUN_BINARY", str(default_run)))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    cpp, python, losses, executors = [], [], set(), set()
    for _ in range(args.rounds):
        rate, loss, executor = cpp_rate(args.edb_run, args.data, args.batch, args.repeat)
        cpp.append(rate)
        losses.add(round(loss, 3))
        executors.add(executor)
        rate, loss, executor = python_rate(args.data, args.batch, args.repeat)
        python.append(rate)
        losses.add(round(loss, 3))
        executors.add(executor)
    overhead = {"leaf": [], "internal": []}
    cpp_call = {"leaf": [], "internal": []}
    for _ in range(args.rounds):
        for name, (py, c) in cell_overhead(args.calls).items():
            overhead[name].append((py - c) * 1e6)
            cpp_call[name].append(c * 1e6)
    report = {
        "data": args.data, "batch": args.batch, "threads": 1, "executor": sorted(executors),
        "rounds": args.rounds, "same_loss": len(losses) == 1,
        "cpp_instances_per_sec": statistics.median(cpp), "python_instances_per_sec": statistics.median(python),
        "python_over_cpp": statistics.median(python) / statistics.median(cpp),
        "cpp_rates": cpp, "python_rates": python,
        "cell_call_overhead_us": {k: statistics.median(v) for k, v in overhead.items()},
        "cell_call_cpp_us": {k: statistics.median(v) for k, v in cpp_call.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"TreeLSTM, {args.data}, batch {args.batch}, one thread, executor {', '.join(sorted(executors))}, "
          f"median of {args.rounds} interleaved rounds:")
    print(f"  C++ edb-run  {report['cpp_instances_per_sec']:8.0f} instances/s")
    print(f"  Python       {report['python_instances_per_sec']:8.0f} instances/s "
          f"({100 * report['python_over_cpp']:.0f}% of C++; target 75%); same loss: {report['same_loss']}")
    for name in ("leaf", "internal"):
        print(f"  {name} cell call: C++ {report['cell_call_cpp_us'][name]:.3f} us, Python adds "
              f"{report['cell_call_overhead_us'][name]:.3f} us (target 0.5)")


if __name__ == "__main__":
    main()
