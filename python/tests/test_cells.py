# Cells: the decorator, outputs, cells on and off agreeing, the body's scope, and their errors.
import numpy as np
import pytest

import edbatch


def make_model():
    model = edbatch.Model("cells", seed=5)
    model.add_parameter("U", 4, 8)
    model.add_parameter("b", 4)
    return model


def tree_sum(engine, model, trees, calls):
    U, b = model.parameter("U"), model.parameter("b")

    @edbatch.Cell((4, 1), 4)
    def combine(t, left, right):
        calls.append(1)
        h = edbatch.tanh(edbatch.affine(t.param(b), t.param(U), edbatch.concat(left, right)))
        return h, edbatch.sigmoid(h)

    with edbatch.Trace(engine) as t:
        def node(depth, seed):
            if depth == 0:
                return t.input([seed, -seed, 0.5 * seed, 1.0])
            return combine(t, node(depth - 1, seed + 1), node(depth - 1, seed - 1))[1]
        roots = [node(2 + i % 2, 0.1 * i) for i in range(trees)]
        return edbatch.concat(roots).value()


def test_cells_on_and_off_agree():
    model = make_model()
    on_calls, off_calls = [], []
    on = tree_sum(edbatch.Engine(), model, 6, on_calls)
    off = tree_sum(edbatch.Engine(cells=False), model, 6, off_calls)
    reference = tree_sum(edbatch.Engine(executor="reference", policy="sequential", cells=False), model, 6, [])
    np.testing.assert_allclose(on, off, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on, reference, rtol=1e-5, atol=1e-6)
    calls = sum(2 ** (2 + i % 2) - 1 for i in range(6))
    assert len(on_calls) == 1        # recorded once per engine
    assert len(off_calls) == calls   # inline at every call


def test_cells_against_numpy():
    model = make_model()
    U, b = model.parameter("U").values(), model.parameter("b").values()
    got = tree_sum(edbatch.Engine(), model, 1, [])

    def node(depth, seed):
        if depth == 0:
            return np.array([[seed], [-seed], [0.5 * seed], [1.0]], dtype=np.float32)
        h = np.tanh(b + U @ np.vstack([node(depth - 1, seed + 1), node(depth - 1, seed - 1)]))
        return 1 / (1 + np.exp(-h))
    np.testing.assert_allclose(got, node(2, 0.0), rtol=1e-5, atol=1e-6)


def test_single_output_and_constructor_form():
    engine = edbatch.Engine()
    double = edbatch.Cell(3, name="double", body=lambda t, x: x * 2.0)
    assert double.name == "double" and double.shapes == [(3, 1)]
    with edbatch.Trace(engine) as t:
        y = double(t, t.input([1, 2, 3]))
        assert isinstance(y, edbatch.Expr)
        np.testing.assert_allclose(y.value()[:, 0], [2, 4, 6])

    @edbatch.Cell(2)
    def pair(t, x):
        return [x + 1.0, edbatch.tanh(x)]
    assert pair.name == "pair"
    with edbatch.Trace(engine) as t:
        a, c = pair(t, t.input([0, 0]))
        np.testing.assert_allclose(a.value()[:, 0], [1, 1])
    assert "pair" in repr(pair)


def test_gradients_through_cells_match_cells_off():
    def grads(cells):
        model = edbatch.Model("g", seed=2)
        W = model.add_parameter("W", 3, 3)
        step = edbatch.Cell(3, body=lambda t, h: edbatch.tanh(t.param(W) @ h))
        with edbatch.Trace(edbatch.Engine(cells=cells)) as t:
            losses = []
            for i in range(4):
                h = t.input([0.1 * i, 0.2, -0.3])
                for _ in range(i + 1):
                    h = step(t, h)
                losses.append(edbatch.pick_neg_log_softmax(h, i % 3))
            return t.backward(edbatch.sum(losses)).of(W)
    np.testing.assert_allclose(grads(True), grads(False), rtol=1e-4, atol=1e-6)


def test_cell_errors():
    engine = edbatch.Engine()
    kept = []

    @edbatch.Cell(2)
    def keeps_scope(t, x):
        kept.append(t)
        return x + 1.0

    with edbatch.Trace(engine) as t:
        x = t.input([1, 2])
        keeps_scope(t, x)
        with pytest.raises(edbatch.UsageError, match="cell body's scope"):
            kept[0].input([1.0])  # the body's scope ended when it returned
        with pytest.raises(edbatch.UsageError, match="argument 1 is 3x1"):
            keeps_scope(t, t.input([1, 2, 3]))
        with pytest.raises(edbatch.UsageError, match="takes 1 arguments"):
            keeps_scope(t, x, x)
        with pytest.raises(TypeError):
            keeps_scope(x)
        with pytest.raises(TypeError):
            keeps_scope(t, 1.0)

        bad = edbatch.Cell(2, body=lambda t, x: 3.0)
        with pytest.raises(edbatch.UsageError, match="must return an Expr"):
            bad(t, x)
        leaf_out = edbatch.Cell(2, body=lambda t, x: x)  # an argument returned unchanged, as with cells off
        np.testing.assert_allclose(leaf_out(t, x).value(), x.value())

        def fails(t, x):
            raise KeyError("from the body")
        with pytest.raises(KeyError, match="from the body"):
            edbatch.Cell(2, body=fails)(t, x)

        inner = edbatch.Cell(2, body=lambda t, x: x * 2.0)
        outer = edbatch.Cell(2, body=lambda t, x: inner(t, x))
        with pytest.raises(edbatch.UsageError, match="nest"):
            outer(t, x)
        np.testing.assert_allclose(keeps_scope(t, x).value()[:, 0], [2, 3])  # still usable

    # With cells off (the body runs on the caller's trace at each call) the same two cases agree
    # with cells on: an argument returned unchanged is the call's value, a cell in a body is refused.
    with edbatch.Trace(edbatch.Engine(cells=False)) as t:
        x = t.input([1, 2])
        np.testing.assert_allclose(leaf_out(t, x).value(), x.value())
        with pytest.raises(edbatch.UsageError, match="cell '<lambda>': the body calls another cell"):
            outer(t, x)
        np.testing.assert_allclose(inner(t, x).value()[:, 0], [2, 4])  # still usable

    with pytest.raises(edbatch.UsageError):
        edbatch.Cell((0, 1), body=lambda t, x: x)
    with pytest.raises(edbatch.UsageError):
        edbatch.Cell("x")
    with pytest.raises(TypeError):
        edbatch.Cell(2)(1, 2)
    with pytest.raises(TypeError):
        edbatch.Cell(2, body=3)
