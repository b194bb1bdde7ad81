# Gradients against numpy, and optimizer steps against hand-written numpy SGD and Adam.
import numpy as np
import pytest

import edbatch


def softmax_loss_model(seed=4):
    model = edbatch.Model("train", seed=seed)
    W = model.add_parameter("W", 3, 4)
    b = model.add_parameter("b", 3)
    E = model.add_lookup("E", 6, 4)
    return model, W, b, E


def record(t, W, b, E, words):
    losses = [edbatch.pick_neg_log_softmax(edbatch.affine(t.param(b), t.param(W), t.lookup(E, w)), w % 3)
              for w in words]
    return edbatch.sum(losses) * (1.0 / len(words))


def numpy_gradients(W, b, E, words):
    w, bias, table = W.values().astype(np.float64), b.values().astype(np.float64), E.values().astype(np.float64)
    gw, gb, ge, loss = np.zeros_like(w), np.zeros_like(bias), np.zeros_like(table), 0.0
    for word in words:
        x = table[word][:, None]
        z = bias + w @ x
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        loss -= np.log(p[word % 3, 0])
        d = p.copy()
        d[word % 3] -= 1
        d /= len(words)
        gw += d @ x.T
        gb += d
        ge[word] += (w.T @ d)[:, 0]
    return loss / len(words), gw, gb, ge


WORDS = [0, 1, 2, 4, 4, 5]


def test_gradients_against_numpy():
    model, W, b, E = softmax_loss_model()
    with edbatch.Trace(edbatch.Engine()) as t:
        g = t.backward(record(t, W, b, E, WORDS))
    loss, gw, gb, ge = numpy_gradients(W, b, E, WORDS)
    assert g.loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(g.of(W), gw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g.of(b), gb, rtol=1e-4, atol=1e-6)
    entries, rows = g.of(E)
    assert entries.tolist() == sorted(set(WORDS)) and entries.dtype == np.int64
    np.testing.assert_allclose(rows, ge[entries], rtol=1e-4, atol=1e-6)
    params = {p.name: grad for p, grad in g.parameters}
    assert set(params) == {"W", "b"}
    [(table, table_entries, _)] = g.tables
    assert table == E and table_entries.tolist() == entries.tolist()
    unused = model.add_parameter("unused", 2, 2)
    assert g.of(unused) is None


def test_backward_into_fills_the_gradients_of_an_earlier_step():
    model, W, b, E = softmax_loss_model()
    engine = edbatch.Engine()
    with edbatch.Trace(engine) as t:
        kept = t.backward(record(t, W, b, E, WORDS))
    with edbatch.Trace(engine) as t:
        again = t.backward(record(t, W, b, E, [3]), into=kept)
    assert again is kept
    loss, gw, gb, ge = numpy_gradients(W, b, E, [3])
    assert kept.loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(kept.of(W), gw, rtol=1e-4, atol=1e-6)
    entries, rows = kept.of(E)
    assert entries.tolist() == [3]
    np.testing.assert_allclose(rows, ge[entries], rtol=1e-4, atol=1e-6)
    with pytest.raises(TypeError, match="into must be the Gradients of an earlier backward"):
        with edbatch.Trace(engine) as t:
            t.backward(record(t, W, b, E, [1]), into="not gradients")


@pytest.mark.parametrize("threads", [1, 2])
def test_record_backward_then_gradients_overlaps_the_next_step(threads):
    # Step 2 records (both passes) while step 1 runs in the background; each step's gradients are
    # numpy's, read after its run().
    model, W, b, E = softmax_loss_model()
    engine = edbatch.Engine(threads=threads)
    steps = [WORDS, [3, 1]]
    traces = [edbatch.Trace(engine) for _ in steps]
    traces[0].record_backward(record(traces[0], W, b, E, steps[0]))
    traces[0].run()
    traces[1].record_backward(record(traces[1], W, b, E, steps[1]))
    kept = traces[0].gradients()
    traces[1].run()
    again = traces[1].gradients(into=kept)
    assert again is kept
    loss, gw, gb, ge = numpy_gradients(W, b, E, steps[1])
    assert again.loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(again.of(W), gw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(again.of(b), gb, rtol=1e-4, atol=1e-6)
    entries, rows = again.of(E)
    assert entries.tolist() == [1, 3]
    np.testing.assert_allclose(rows, ge[entries], rtol=1e-4, atol=1e-6)
    for t in traces:
        t.finish()
    with edbatch.Trace(engine) as t:
        with pytest.raises(edbatch.UsageError, match="no backward pass; record one with record_backward"):
            t.gradients()
        t.record_backward(record(t, W, b, E, [2]))
        with pytest.raises(TypeError, match="into must be the Gradients of an earlier step"):
            t.gradients(into="not gradients")


@pytest.mark.parametrize("threads", [1, 2])
def test_step_on_an_engines_threads_equals_the_plain_step(threads):
    # optimizer.step(g, engine) cuts the update across the engine's threads: the same bits.
    runs = []
    for on_engine in (False, True):
        model, W, b, E = softmax_loss_model()
        engine = edbatch.Engine(threads=threads)
        optimizer = edbatch.Optimizer(model, kind="adam", learning_rate=0.05)
        norms = []
        for words in (WORDS, [3, 1, 1]):
            with edbatch.Trace(engine) as t:
                g = t.backward(record(t, W, b, E, words))
            norms.append(optimizer.step(g, engine=engine) if on_engine else optimizer.step(g))
        runs.append((norms, W.values().copy(), b.values().copy(), E.values().copy()))
    assert runs[0][0] == runs[1][0]
    for plain, cut in zip(runs[0][1:], runs[1][1:]):
        assert plain.tobytes() == cut.tobytes()


def test_gradients_add():
    model, W, b, E = softmax_loss_model()
    engine = edbatch.Engine()
    with edbatch.Trace(engine) as t:
        g1 = t.backward(record(t, W, b, E, [0, 1]))
    with edbatch.Trace(engine) as t:
        g2 = t.backward(record(t, W, b, E, [2]))
    total_loss = g1.loss + g2.loss
    w1 = g1.of(W) + g2.of(W)
    g1.add(g2)
    assert g1.loss == pytest.approx(total_loss)
    np.testing.assert_allclose(g1.of(W), w1, rtol=1e-6)
    assert g1.of(E)[0].tolist() == [0, 1, 2]


def step_once(kind, **options):
    model, W, b, E = softmax_loss_model()
    before = {p.name: p.values().copy() for p in (W, b)}
    table_before = E.values().copy()
    optimizer = edbatch.Optimizer(model, kind=kind, **options)
    engine = edbatch.Engine()
    grads = []
    for _ in range(2):
        with edbatch.Trace(engine) as t:
            g = t.backward(record(t, W, b, E, WORDS))
            grads.append((g.of(W), g.of(b), g.of(E)))
            norm = optimizer.step(g)
            assert norm == pytest.approx(np.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in
                                                     (grads[-1][0], grads[-1][1], grads[-1][2][1]))), rel=1e-4)
    assert optimizer.steps == 2
    return (W, b, E), before, table_before, grads


def test_sgd_with_momentum_against_numpy():
    lr, mu = 0.1, 0.9
    (W, b, E), before, table_before, grads = step_once("sgd", learning_rate=lr, momentum=mu)
    for index, p in ((0, W), (1, b)):
        v1 = grads[0][index]
        v2 = mu * v1 + grads[1][index]
        np.testing.assert_allclose(p.values(), before[p.name] - lr * v1 - lr * v2, rtol=1e-5, atol=1e-6)
    table = table_before.copy()
    v = np.zeros_like(table)
    for g in grads:
        entries, rows = g[2]
        v[entries] = mu * v[entries] + rows
        table[entries] -= lr * v[entries]
    np.testing.assert_allclose(E.values(), table, rtol=1e-5, atol=1e-6)


def test_adam_against_numpy():
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    (W, b, E), before, _, grads = step_once("adam", learning_rate=lr)
    for index, p in ((0, W), (1, b)):
        w = before[p.name].astype(np.float64)
        m = v = 0
        for t, g in enumerate(grads, 1):
            g = g[index].astype(np.float64)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        np.testing.assert_allclose(p.values(), w, rtol=1e-4, atol=1e-6)


def test_clipping_and_options(tmp_path):
    model, W, b, E = softmax_loss_model()
    before = W.values().copy()
    optimizer = edbatch.Optimizer(model, kind="sgd", learning_rate=1.0, clip_norm=1e-3)
    assert optimizer.options["clip_norm"] == pytest.approx(1e-3)
    with edbatch.Trace(edbatch.Engine()) as t:
        g = t.backward(record(t, W, b, E, WORDS))
        norm = optimizer.step(g)
    assert norm > 1e-3
    np.testing.assert_allclose(W.values(), before - g.of(W) * (1e-3 / norm), rtol=1e-4, atol=1e-7)
    optimizer.learning_rate = 0.5
    assert optimizer.options["learning_rate"] == 0.5
    optimizer.save(tmp_path / "opt")
    again = edbatch.Optimizer(model, kind="sgd")
    again.load(tmp_path / "opt")
    assert again.steps == 1 and again.learning_rate == 0.5


def test_training_lowers_the_loss_and_model_round_trips(tmp_path):
    model, W, b, E = softmax_loss_model()
    optimizer = edbatch.Optimizer(model, kind="adam", learning_rate=0.05)
    engine = edbatch.Engine()
    losses = []
    for _ in range(40):
        with edbatch.Trace(engine) as t:
            g = t.backward(record(t, W, b, E, list(range(6))))
            optimizer.step(g)
            losses.append(g.loss)
    assert losses[-1] < 0.3 * losses[0]
    model.save(tmp_path / "m.bin")
    copy, W2, b2, E2 = softmax_loss_model(seed=99)
    copy.load(tmp_path / "m.bin")
    np.testing.assert_array_equal(W2.values(), W.values())
    np.testing.assert_array_equal(E2.values(), E.values())
    with edbatch.Trace(engine) as t:
        assert record(t, W2, b2, E2, [1]).scalar() == record(t, W, b, E, [1]).scalar()


def test_save_training_is_one_unit(tmp_path):
    model, W, b, E = softmax_loss_model()
    optimizer = edbatch.Optimizer(model, kind="adam", learning_rate=0.05)
    with edbatch.Trace(edbatch.Engine()) as t:
        optimizer.step(t.backward(record(t, W, b, E, [1, 2])))
    optimizer.save_training(tmp_path / "run")
    copy, W2, b2, E2 = softmax_loss_model(seed=99)
    again = edbatch.Optimizer(copy, kind="adam")
    assert again.load_training(tmp_path / "run")
    assert again.steps == 1
    np.testing.assert_array_equal(W2.values(), W.values())
    # A model saved later beside the earlier state: refused, naming both files.
    changed = W.values().copy()
    changed[0, 0] += 1.0
    W.set_values(changed)
    model.save(tmp_path / "run")
    with pytest.raises(edbatch.UsageError, match="was not saved with the model values in"):
        edbatch.Optimizer(copy, kind="adam").load_training(tmp_path / "run")
    with pytest.raises(edbatch.UsageError, match="is a directory"):
        again.load_training(tmp_path)


def test_set_values_seen_by_later_traces():
    model = edbatch.Model("v")
    W = model.add_parameter("W", 2, 2)
    E = model.add_lookup("E", 3, 2)
    engine = edbatch.Engine()
    cell = edbatch.Cell(2, body=lambda t, x: edbatch.tanh(t.param(W) @ x))
    for scale in (1.0, 2.0):
        W.set_values(np.array([[scale, 0], [0, scale]], dtype=np.float32))
        E.set_values(np.arange(6, dtype=np.float32).reshape(3, 2) / 10)
        with edbatch.Trace(engine) as t:
            got = cell(t, t.lookup(E, 2)).value()[:, 0]
        np.testing.assert_allclose(got, np.tanh(scale * np.array([0.4, 0.5])), rtol=1e-5)
    np.testing.assert_allclose(E.values()[1], [0.2, 0.3])
