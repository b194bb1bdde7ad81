# One rank of test_distributed.py's training, run under mpirun (not collected by pytest): a word
# classifier with a lookup table trained by Adam on global batches split across the ranks; rank 0
# prints every step's loss and the final weights as JSON.
import json
import sys

import numpy as np

import edbatch

EPOCHS, BATCH, COUNT = 3, 8, 44  # the last batch of each epoch holds 4 instances


def instances():
    rng = np.random.default_rng(7)
    words = [list(rng.integers(0, 30, size=int(rng.integers(1, 6)))) for _ in range(COUNT)]
    return [(w, int(sum(w) % 3)) for w in words]


def main():
    data = instances()
    model = edbatch.Model("words", seed=3)
    W, b, E = model.add_parameter("W", 3, 8), model.add_parameter("b", 3), model.add_lookup("E", 30, 8)
    unused = model.add_parameter("unused", 2, 2)  # no loss depends on it: it must not move
    parallel = edbatch.DataParallel(model)
    engine = edbatch.Engine()
    optimizer = edbatch.Optimizer(model, kind="adam", learning_rate=0.05)
    losses = []
    for epoch in range(EPOCHS):
        order = np.random.default_rng(epoch).permutation(COUNT)
        for begin in range(0, COUNT, BATCH):
            end = min(COUNT, begin + BATCH)
            # Shares of about equal cost: the words each instance looks up.
            first, last = parallel.share([float(len(data[order[k]][0])) for k in range(begin, end)])
            first, last = first + begin, last + begin
            gradients = edbatch.Gradients()
            if first < last:
                with edbatch.Trace(engine) as t:
                    terms = []
                    for k in range(first, last):
                        words, label = data[order[k]]
                        hidden = edbatch.tanh(edbatch.sum([t.lookup(E, int(w)) for w in words]))
                        terms.append(edbatch.pick_neg_log_softmax(edbatch.affine(t.param(b), t.param(W), hidden), label))
                    gradients = t.backward(edbatch.sum(terms) * (1.0 / (end - begin)))
            parallel.reduce(gradients)
            assert gradients.of(unused) is None
            losses.append(gradients.loss)
            optimizer.step(gradients)
    parallel.check_weights("at the end")
    if parallel.rank == 0:
        json.dump({"ranks": parallel.size, "losses": losses, "W": W.values().tolist(), "E": E.values().tolist(),
                   "stats": parallel.stats}, sys.stdout)


if __name__ == "__main__":
    main()
