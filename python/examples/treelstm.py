#!/usr/bin/env python3
"""The binary TreeLSTM sample (samples/treelstm.cpp) in Python: inference and training on SST
bracket trees, batched by edbatch.

Leaves take i, o, u from W x + b; internal nodes from U [h1; h2] + b, with one forget gate per
child sharing a bias; a label loss at every node. The model's parameters (names, shapes, order),
its seed, the vocabulary (word ids by first appearance, 0 is <unk>), the traces of --batch
instances and the training loop (a splitmix64 shuffle per epoch, the last --holdout held out)
are those of `edb-run treelstm`, so both report the same losses for the same flags.

    python3 python/examples/treelstm.py --data ../shared/data/sst-like.txt --limit 200 --json
    python3 python/examples/treelstm.py --train --epochs 2 --limit 500
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import edbatch

LABELS = 5
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data", "sst-like.txt"))
TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_tree(line, where):
    """One SST bracket tree -> nodes in post-order: (label, left, right, word); left < 0 for a leaf."""
    tokens = TOKEN.findall(line)
    nodes, stack, i = [], [], 0

    def fail(expected):
        raise ValueError(f"{where}: expected {expected}, found {tokens[i]!r}" if i < len(tokens)
                         else f"{where}: expected {expected}, found end of line")

    while i < len(tokens):
        if tokens[i] != "(":
            fail("'('")
        i += 1
        if i >= len(tokens) or tokens[i] not in ("0", "1", "2", "3", "4"):
            fail("label 0-4")
        label = int(tokens[i])
        i += 1
        if i < len(tokens) and tokens[i] == "(":
            stack.append([label, []])
            continue
        if i >= len(tokens) or tokens[i] == ")":
            fail("word or '('")
        word = tokens[i]
        i += 1
        if i >= len(tokens) or tokens[i] != ")":
            fail("')' after word")
        i += 1
        nodes.append((label, -1, -1, word))
        done = len(nodes) - 1
        while True:
            if not stack:
                if i < len(tokens):
                    fail("end of line after tree")
                return nodes
            parent = stack[-1]
            parent[1].append(done)
            if len(parent[1]) == 1:
                break
            if i >= len(tokens) or tokens[i] != ")":
                fail("')' after two subtrees")
            i += 1
            stack.pop()
            nodes.append((parent[0], parent[1][0], parent[1][1], ""))
            done = len(nodes) - 1
    fail("'('")


def read_trees(path, limit):
    trees = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                trees.append(parse_tree(line, f"{path}:{number}"))
                if 0 < limit <= len(trees):
                    break
    if not trees:
        raise SystemExit(f"treelstm.py: no trees in {path}")
    return trees


class Vocabulary:
    """Word ids by first appearance; 0 is <unk>."""

    def __init__(self):
        self.ids = {"<unk>": 0}

    def add(self, word):
        return self.ids.setdefault(word, len(self.ids))

    def __len__(self):
        return len(self.ids)


class TreeLstm:
    def __init__(self, trees, embed, hidden, seed):
        vocabulary = Vocabulary()
        # Per tree: (label, left, right, word id) in post-order; word id -1 inside.
        self.trees = [[(label, left, right, vocabulary.add(word) if left < 0 else -1)
                       for label, left, right, word in tree] for tree in trees]
        h = hidden
        self.model = model = edbatch.Model("treelstm", seed)
        self.E = model.add_lookup("E", len(vocabulary), embed)
        W_iou = model.add_parameter("W_iou", 3 * h, embed)
        b_iou_leaf = model.add_parameter("b_iou_leaf", 3 * h, 1)
        U_iou = model.add_parameter("U_iou", 3 * h, 2 * h)
        b_iou = model.add_parameter("b_iou", 3 * h, 1)
        U_f1 = model.add_parameter("U_f1", h, h)
        U_f2 = model.add_parameter("U_f2", h, h)
        b_f = model.add_parameter("b_f", h, 1)
        self.W_out = model.add_parameter("W_out", LABELS, h)
        self.b_out = model.add_parameter("b_out", LABELS, 1)
        self.vocabulary_size = len(vocabulary)
        sigmoid, tanh, affine = edbatch.sigmoid, edbatch.tanh, edbatch.affine

        @edbatch.Cell(embed, name="treelstm_leaf")
        def leaf(t, x):
            iou = affine(t.param(b_iou_leaf), t.param(W_iou), x)
            c = sigmoid(iou[0:h]) * tanh(iou[2 * h:3 * h])
            return sigmoid(iou[h:2 * h]) * tanh(c), c

        @edbatch.Cell(h, h, h, h, name="treelstm_internal")
        def internal(t, h1, c1, h2, c2):
            iou = affine(t.param(b_iou), t.param(U_iou), edbatch.concat(h1, h2))
            i = sigmoid(iou[0:h])
            o = sigmoid(iou[h:2 * h])
            u = tanh(iou[2 * h:3 * h])
            f1 = sigmoid(affine(t.param(b_f), t.param(U_f1), h1))
            f2 = sigmoid(affine(t.param(b_f), t.param(U_f2), h2))
            c = edbatch.sum(i * u, f1 * c1, f2 * c2)
            return o * tanh(c), c

        self.leaf, self.internal = leaf, internal

    def record(self, t, index, losses=None, predictions=None):
        """Records tree `index`: at every node, in post-order, its loss into `losses` and
        (scores, gold, is_root) into `predictions`, when given."""
        tree = self.trees[index]
        leaf, internal, lookup, E = self.leaf, self.internal, t.lookup, self.E
        b_out, W_out = t.param(self.b_out), t.param(self.W_out)
        affine, pick = edbatch.affine, edbatch.pick_neg_log_softmax
        states = [None] * len(tree)
        last = len(tree) - 1
        for n, (label, left, right, word) in enumerate(tree):
            if left < 0:
                hc = states[n] = leaf(t, lookup(E, word))
            else:
                h1, c1 = states[left]
                h2, c2 = states[right]
                hc = states[n] = internal(t, h1, c1, h2, c2)
            scores = affine(b_out, W_out, hc[0])
            if losses is not None:
                losses.append(pick(scores, label))
            if predictions is not None:
                predictions.append((scores, label, n == last))

    def record_loss(self, t, index):
        """The tree's loss: the sum of its nodes' (a 1x1 Expr)."""
        losses = []
        self.record(t, index, losses)
        return edbatch.sum(losses)


class Progress:
    """tqdm when it is installed, else a plain bar on stderr; nothing when stderr is no terminal."""

    def __init__(self, total, description, enabled):
        self.total, self.done, self.description = total, 0, description
        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None
        if self.enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc=description, unit="inst", file=sys.stderr)
            except ImportError:
                self.start = time.perf_counter()

    def update(self, count, note=""):
        self.done += count
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(count)
            if note:
                self.bar.set_postfix_str(note)
            return
        width = 30
        filled = int(width * self.done / max(1, self.total))
        rate = self.done / max(1e-9, time.perf_counter() - self.start)
        sys.stderr.write(f"\r{self.description} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} {rate:.0f} inst/s {note}")
        sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def run_pass(sample, engine, batch, progress=None):
    """One pass over the workload in traces of `batch`: trace i+1 is recorded while trace i runs
    (in the background with threads >= 2), as edb-run does. Returns (summed loss, recording s)."""
    count = len(sample.trees)
    loss, recording = 0.0, 0.0
    pending = None  # (trace, total, instances)
    for first in range(0, count, batch):
        last = min(count, first + batch)
        trace = edbatch.Trace(engine)
        start = time.perf_counter()
        total = edbatch.sum([sample.record_loss(trace, i) for i in range(first, last)])
        recording += time.perf_counter() - start
        trace.run()
        if pending:
            loss += pending[1].scalar()
            pending[0].finish()
            if progress:
                progress.update(pending[2])
        pending = (trace, total, last - first)
    loss += pending[1].scalar()
    pending[0].finish()
    if progress:
        progress.update(pending[2])
    return loss, recording


def infer(sample, engine, args):
    count = len(sample.trees)
    run_pass(sample, engine, args.batch)  # warm-up: first-use costs stay out of the measurement
    engine.reset_stats()
    progress = Progress(count * args.repeat, "treelstm.py", not args.json)
    rates, loss, recording, total = [], 0.0, 0.0, 0.0
    for _ in range(args.repeat):
        start = time.perf_counter()
        loss, seconds = run_pass(sample, engine, args.batch, progress)
        elapsed = time.perf_counter() - start
        recording += seconds
        total += elapsed
        rates.append(count / elapsed)
    progress.close()
    stats = engine.stats()
    return {"model": "treelstm", "language": "python", **engine.options, "batch": args.batch,
            "embed": args.embed, "hidden": args.hidden, "data": args.data, "repeat": args.repeat,
            "instances": count * args.repeat, "instances_per_sec": statistics.median(rates),
            "loss": loss, "stats": stats,
            "time_ms": {"trace": 1000 * recording, "total": 1000 * total}}


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def shuffled(count, seed, epoch):
    """Epoch `epoch`'s order: Fisher-Yates from (seed, epoch), as samples/training.cpp draws it."""
    order = list(range(count))
    state = (seed * 0x2545F4914F6CDD1D + epoch) & 0xFFFFFFFFFFFFFFFF
    state, _ = splitmix64(state)
    for i in range(count, 1, -1):
        state, r = splitmix64(state)
        j = r % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def evaluate(sample, engine, first, last, batch):
    """Held-out loss (mean per instance) and root accuracy against the majority class."""
    loss, correct, roots, labels = 0.0, 0, 0, {}
    for begin in range(first, last, batch):
        with edbatch.Trace(engine) as t:
            predictions, losses = [], []
            for i in range(begin, min(last, begin + batch)):
                sample.record(t, i, losses, predictions)
            loss += edbatch.sum(losses).scalar()
            for scores, gold, root in predictions:
                if root:
                    values = scores.value()[:, 0]
                    correct += int(values.argmax()) == gold
                    roots += 1
                    labels[gold] = labels.get(gold, 0) + 1
    instances = last - first
    if instances == 0:
        return {"heldout_loss": None, "heldout_accuracy": None, "majority_accuracy": None}
    return {"heldout_loss": loss / instances, "heldout_accuracy": correct / roots,
            "majority_accuracy": max(labels.values()) / roots}


def train(sample, engine, args):
    count = len(sample.trees)
    if not 0 <= args.holdout < 1:
        raise SystemExit(f"treelstm.py: --holdout must be in [0, 1), got {args.holdout}")
    heldout = int(round(count * args.holdout))  # C++ llround: halves away from zero
    if count * args.holdout - int(count * args.holdout) == 0.5:
        heldout = int(count * args.holdout) + 1
    if args.holdout > 0 and heldout == 0:
        heldout = 1
    if heldout >= count:
        raise SystemExit(f"treelstm.py: --holdout {args.holdout} leaves no training instance of {count}")
    train_count = count - heldout
    kind = args.optimizer
    lr = args.lr if args.lr is not None else (0.01 if kind == "adam" else 0.1)
    options = {"kind": kind, "learning_rate": lr, "clip_norm": args.clip}
    if kind == "sgd":
        options["momentum"] = args.momentum
    optimizer = edbatch.Optimizer(sample.model, **options)
    report = {"model": "treelstm", "language": "python", **engine.options, "batch": args.batch,
              "embed": args.embed, "hidden": args.hidden, "data": args.data,
              "optimizer": optimizer.options, "holdout": args.holdout,
              "train_instances": train_count, "heldout_instances": heldout,
              "initial": evaluate(sample, engine, train_count, count, args.batch), "epochs": []}
    gradients = None  # the first step's Gradients, filled again by every later step
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        order = shuffled(train_count, args.seed, epoch)
        loss_sum, norm_sum, steps = 0.0, 0.0, 0
        progress = Progress(train_count, f"epoch {epoch}/{args.epochs}", not args.json)
        for begin in range(0, train_count, args.batch):
            end = min(train_count, begin + args.batch)
            with edbatch.Trace(engine) as t:
                losses = [sample.record_loss(t, order[k]) for k in range(begin, end)]
                loss = edbatch.sum(losses) * (1.0 / (end - begin))
                loss_sum += loss.scalar() * (end - begin)
                gradients = t.backward(loss, into=gradients)  # reuses the last step's storage
                norm_sum += optimizer.step(gradients)
            steps += 1
            progress.update(end - begin, f"loss {loss_sum / end:.4f}")
        progress.close()
        seconds = time.perf_counter() - start
        result = {"epoch": epoch, "train_loss": loss_sum / train_count, "gradient_norm": norm_sum / steps,
                  "instances_per_sec": train_count / seconds}
        result.update(evaluate(sample, engine, train_count, count, args.batch))
        report["epochs"].append(result)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="The TreeLSTM sample in Python: inference (median instances/s over --repeat passes "
                    "after a warm-up, and the summed loss of one pass) or --train.")
    parser.add_argument("--data", default=DEFAULT_DATA, help="SST bracket trees, one per line (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=-1, help="use the first N trees (default: all)")
    parser.add_argument("--batch", type=int, default=64, help="instances per trace (default 64)")
    parser.add_argument("--embed", type=int, default=128, help="embedding size (default 128)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size (default 128)")
    parser.add_argument("--seed", type=int, default=1, help="model initialisation and shuffle seed (default 1)")
    parser.add_argument("--policy", help="batching policy (default: the engine's)")
    parser.add_argument("--executor", help="executor (default: the engine's)")
    parser.add_argument("--threads", type=int, help="engine threads (default: the engine's)")
    parser.add_argument("--cells", choices=["on", "off"], default="on", help="record cells as calls (default on)")
    parser.add_argument("--repeat", type=int, default=3, help="measured inference passes (default 3)")
    parser.add_argument("--train", action="store_true", help="train instead of measuring inference")
    parser.add_argument("--epochs", type=int, default=1, help="training epochs (default 1)")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="adam", help="(default adam)")
    parser.add_argument("--lr", type=float, help="learning rate (default 0.01 for adam, 0.1 for sgd)")
    parser.add_argument("--momentum", type=float, default=0.0, help="sgd momentum (default 0)")
    parser.add_argument("--clip", type=float, default=0.0, help="global gradient norm clip (default 0: off)")
    parser.add_argument("--holdout", type=float, default=0.1, help="held-out fraction, the last trees (default 0.1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeat < 1 or args.epochs < 1:
        parser.error("--batch, --repeat and --epochs must be at least 1")

    options = {k: v for k, v in (("policy", args.policy), ("executor", args.executor),
                                 ("threads", args.threads)) if v is not None}
    engine = edbatch.Engine(cells=args.cells == "on", **options)
    sample = TreeLstm(read_trees(args.data, args.limit), args.embed, args.hidden, args.seed)
    report = train(sample, engine, args) if args.train else infer(sample, engine, args)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.train:
        print(f"treelstm.py --train: {len(sample.trees)} trees, {sample.vocabulary_size} word types, {args.data}")
        initial = report["initial"]
        if initial["heldout_loss"] is not None:
            print(f"before training: held-out loss {initial['heldout_loss']:.4f}, root accuracy "
                  f"{100 * initial['heldout_accuracy']:.1f}% (majority {100 * initial['majority_accuracy']:.1f}%)")
        for e in report["epochs"]:
            line = f"epoch {e['epoch']}: train loss {e['train_loss']:.4f}, {e['instances_per_sec']:.0f} instances/s"
            if e["heldout_loss"] is not None:
                line += (f", held-out loss {e['heldout_loss']:.4f}, root accuracy "
                         f"{100 * e['heldout_accuracy']:.1f}% (majority {100 * e['majority_accuracy']:.1f}%)")
            print(line)
    else:
        print(f"treelstm.py: {len(sample.trees)} trees, {sample.vocabulary_size} word types, {args.data}")
        print(f"policy {report['policy']}, executor {report['executor']}, threads {report['threads']}, "
              f"batch {args.batch}, embed {args.embed}, hidden {args.hidden}")
        print(f"instances/s (median of {args.repeat}): {report['instances_per_sec']:.1f}")
        print(f"loss (one pass): {report['loss']:.4f}")
        print(f"batches {report['stats']['batches']}, lower bound {report['stats']['lower_bound']}")
        print(f"recording {report['time_ms']['trace']:.1f} ms of {report['time_ms']['total']:.1f} ms")


if __name__ == "__main__":
    main()
