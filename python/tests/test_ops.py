# Every op and operator against numpy, on the default engine and on the reference executor.
import math

import numpy as np
import pytest

import edbatch

RNG = np.random.default_rng(7)
ENGINES = [{}, {"executor": "reference", "policy": "sequential"}, {"cells": False}]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(got, want):
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float32), rtol=2e-5, atol=2e-6)


@pytest.fixture(params=range(len(ENGINES)), ids=["default", "reference", "cells-off"])
def engine(request):
    return edbatch.Engine(**ENGINES[request.param])


def test_input_layouts(engine):
    m = rand(3, 4)
    with edbatch.Trace(engine) as t:
        assert t.input([1, 2, 3]).shape == (3, 1)
        close(t.input([1, 2, 3]).value(), [[1], [2], [3]])
        close(t.input(np.array([1, 2], dtype=np.float32)).value(), [[1], [2]])
        close(t.input(m).value(), m)                       # C order in, rows x cols out
        close(t.input(np.asfortranarray(m)).value(), m)
        close(t.input(m[:, ::2]).value(), m[:, ::2])       # strided views too
        close(t.input([[1, 2], [3, 4]]).value(), [[1, 2], [3, 4]])
        v = t.input(m).value()
        assert v.dtype == np.float32 and v.shape == (3, 4)


def test_input_shapes():
    """A 2-D input keeps its (rows, cols); n values in one dimension make a column (n, 1)."""
    with edbatch.Trace(edbatch.Engine()) as t:
        x, y = t.input(np.zeros((3, 2), np.float32)), t.input(np.zeros(5, np.float32))
        assert x.shape == (3, 2) and x.value().shape == (3, 2)
        assert y.shape == (5, 1) and y.value().shape == (5, 1)


def test_parameters_and_lookup(engine):
    model = edbatch.Model("ops", seed=3)
    W = model.add_parameter("W", 4, 3)
    E = model.add_lookup("E", 10, 4)
    with edbatch.Trace(engine) as t:
        close(t.param(W).value(), W.values())
        close(t.lookup(E, 7).value(), E.values()[7][:, None])


def test_binary_ops(engine):
    a, b, c = rand(5, 1), rand(5, 1), rand(5, 3)
    with edbatch.Trace(engine) as t:
        x, y, z = t.input(a), t.input(b), t.input(c)
        close((x + y).value(), a + b)
        close((x - y).value(), a - b)
        close((x * y).value(), a * b)
        close(edbatch.cmult(x, y).value(), a * b)
        close(edbatch.add(x, y).value(), a + b)
        close(edbatch.sub(x, y).value(), a - b)
        close((z + z).value(), c + c)


def test_constant_ops(engine):
    a = rand(4, 1)
    with edbatch.Trace(engine) as t:
        x = t.input(a)
        close((x * 2.5).value(), a * 2.5)
        close((2.5 * x).value(), a * 2.5)
        close((x + 1.5).value(), a + 1.5)
        close((1.5 + x).value(), a + 1.5)
        close((x - 1.5).value(), a - 1.5)
        close((1.5 - x).value(), 1.5 - a)
        close((x / 4).value(), a / 4)
        close((-x).value(), -a)
        close((x * 2).value(), a * 2)  # ints are constants too


def test_products(engine):
    w, v, b2, w2, v2 = rand(3, 4), rand(4, 1), rand(3, 1), rand(3, 2), rand(2, 1)
    m, n = rand(4, 4), rand(4, 2)
    with edbatch.Trace(engine) as t:
        W, V, B, W2, V2 = t.input(w), t.input(v), t.input(b2), t.input(w2), t.input(v2)
        close((W @ V).value(), w @ v)
        close(edbatch.matmul(W, V).value(), w @ v)
        close(edbatch.affine(B, W, V).value(), b2 + w @ v)
        close(edbatch.affine(B, W, V, W2, V2).value(), b2 + w @ v + w2 @ v2)
        close(edbatch.affine([B, W, V, W2, V2]).value(), b2 + w @ v + w2 @ v2)
        close((t.input(m) @ t.input(n)).value(), m @ n)
        close(edbatch.matvec(t.input(m), V).value(), m @ v)


def test_activations(engine):
    a = rand(6, 2)
    with edbatch.Trace(engine) as t:
        x = t.input(a)
        close(edbatch.tanh(x).value(), np.tanh(a))
        close(edbatch.sigmoid(x).value(), 1 / (1 + np.exp(-a)))
        close(edbatch.relu(x).value(), np.maximum(a, 0))
        e = np.exp(a - a.max(axis=0))
        close(edbatch.softmax(x).value(), e / e.sum(axis=0))
        close(edbatch.log_softmax(x).value(), np.log(e / e.sum(axis=0)))


def test_model_author_ops(engine):
    a, b, m = rand(4, 1), rand(4, 1), rand(3, 2)
    with edbatch.Trace(engine) as t:
        x, y, M = t.input(a), t.input(b), t.input(m)
        close(edbatch.exp(x).value(), np.exp(a))
        close(edbatch.log(edbatch.exp(x) + 0.5).value(), np.log(np.exp(a) + 0.5))
        close(edbatch.div(x, y).value(), a / b)
        close((x / y).value(), a / b)
        close((x / 4.0).value(), a / 4)
        close(edbatch.max(x, y).value(), np.maximum(a, b))
        close(edbatch.min(x, y).value(), np.minimum(a, b))
        close(edbatch.sum_elements(M).value(), [[m.sum()]])
        close(edbatch.mean_elements(M).value(), [[m.mean()]])
        close(edbatch.transpose(M).value(), m.T)
        assert edbatch.dropout(x, 0.5).node_id == x.node_id  # inference: x itself
        dropped = edbatch.dropout(t.input(np.ones((1000, 1), np.float32)), 0.5, training=True, seed=2).value()
        assert set(np.unique(dropped)) == {0.0, 2.0}
        assert 400 < (dropped == 0).sum() < 600
        with pytest.raises(edbatch.UsageError, match=r"edb::dropout\(\): p is 1; expected"):
            edbatch.dropout(x, 1.0, training=True)
        with pytest.raises(edbatch.UsageError, match=r"edb::div\(\): argument 2 is 3x2 but argument 1 is 4x1"):
            edbatch.div(x, M)


SELU_LAMBDA, SELU_ALPHA = 1.0507009873554805, 1.6732632423543772


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


# The unary ops of issue 46: (name, its value, its derivative), in float64. sqrt reads x^2 + 0.5,
# acosh x^2 + 1.5 (INNER); W's values are inside (-1, 1), the domain of atanh, asin and acos.
UNARY = [
    ("sqrt", lambda a: np.sqrt(a * a + 0.5), lambda a: a / np.sqrt(a * a + 0.5)),
    ("abs", np.abs, np.sign),
    ("square", lambda a: a * a, lambda a: 2 * a),
    ("cube", lambda a: a ** 3, lambda a: 3 * a * a),
    ("softsign", lambda a: a / (1 + np.abs(a)), lambda a: 1 / (1 + np.abs(a)) ** 2),
    ("silu", lambda a: a * _sigmoid(a), lambda a: _sigmoid(a) * (1 + a * (1 - _sigmoid(a)))),
    ("elu", lambda a: np.where(a > 0, a, np.expm1(a)), lambda a: np.where(a > 0, 1, np.exp(a))),
    ("selu", lambda a: SELU_LAMBDA * np.where(a > 0, a, SELU_ALPHA * np.expm1(a)),
     lambda a: SELU_LAMBDA * np.where(a > 0, 1, SELU_ALPHA * np.exp(a))),
    ("log_sigmoid", lambda a: np.log(_sigmoid(a)), lambda a: _sigmoid(-a)),
    ("erf", lambda a: np.vectorize(math.erf)(a), lambda a: 2 / np.sqrt(np.pi) * np.exp(-a * a)),
    ("sin", np.sin, np.cos),
    ("cos", np.cos, lambda a: -np.sin(a)),
    ("sinh", np.sinh, np.cosh),
    ("cosh", np.cosh, np.sinh),
    ("round", lambda a: np.sign(a) * np.floor(np.abs(a) + 0.5), np.zeros_like),
    ("ceil", np.ceil, np.zeros_like),
    ("floor", np.floor, np.zeros_like),
    ("tan", np.tan, lambda a: 1 + np.tan(a) ** 2),
    ("asinh", np.arcsinh, lambda a: 1 / np.sqrt(a * a + 1)),
    ("acosh", lambda a: np.arccosh(a * a + 1.5), lambda a: 2 * a / np.sqrt((a * a + 1.5) ** 2 - 1)),
    ("atanh", np.arctanh, lambda a: 1 / (1 - a * a)),
    ("asin", np.arcsin, lambda a: 1 / np.sqrt(1 - a * a)),
    ("acos", np.arccos, lambda a: -1 / np.sqrt(1 - a * a)),
    ("atan", np.arctan, lambda a: 1 / (1 + a * a)),
]
INNER = {"sqrt": lambda x: edbatch.square(x) + 0.5, "acosh": lambda x: edbatch.square(x) + 1.5}


@pytest.mark.parametrize("name,value,derivative", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ops(engine, name, value, derivative):
    model = edbatch.Model("unary", seed=5)
    W = model.add_parameter("W", 4, 3)
    w = W.values().astype(np.float64)
    op = getattr(edbatch, name)
    with edbatch.Trace(engine) as t:
        x = t.param(W)
        y = op(INNER.get(name, lambda e: e)(x))
        close(y.value(), value(w))
        g = t.backward(edbatch.sum_elements(y))
        np.testing.assert_allclose(g.of(W), derivative(w), rtol=1e-4, atol=1e-6)


def test_pow(engine):
    model = edbatch.Model("pow", seed=5)
    X, Y = model.add_parameter("X", 4, 3), model.add_parameter("Y", 4, 3)
    x = X.values().astype(np.float64) ** 2 + 0.5
    y = 2 * Y.values().astype(np.float64)
    with edbatch.Trace(engine) as t:
        p = edbatch.pow(edbatch.square(t.param(X)) + 0.5, t.param(Y) * 2.0)
        close(p.value(), x ** y)
        g = t.backward(edbatch.sum_elements(p))
        np.testing.assert_allclose(g.of(X), y * x ** (y - 1) * 2 * X.values(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(g.of(Y), x ** y * np.log(x) * 2, rtol=1e-4, atol=1e-6)
        close(edbatch.pow(t.input([-2.0, -2.0, 0.0]), t.input([3.0, 2.0, 2.0])).value(), [[-8.0], [4.0], [0.0]])
        with pytest.raises(edbatch.UsageError, match=r"edb::pow\(\)"):
            edbatch.pow(t.input([1.0, 2.0]), t.input([1.0, 2.0, 3.0]))


def test_loss(engine):
    a = rand(5, 1)
    with edbatch.Trace(engine) as t:
        loss = edbatch.pick_neg_log_softmax(t.input(a), 3)
        e = np.exp(a[:, 0] - a.max())
        want = -np.log(e[3] / e.sum())
        assert loss.shape == (1, 1)
        assert loss.scalar() == pytest.approx(want, rel=1e-5)
        assert float(loss) == pytest.approx(want, rel=1e-5)


def test_structure_ops(engine):
    a, b, c = rand(3, 1), rand(2, 1), rand(3, 1)
    with edbatch.Trace(engine) as t:
        x, y, z = t.input(a), t.input(b), t.input(c)
        close(edbatch.sum(x, z).value(), a + c)
        close(edbatch.sum([x, z, x]).value(), a + c + a)
        close(edbatch.concat(x, y).value(), np.vstack([a, b]))
        close(edbatch.concat([y, x, y]).value(), np.vstack([b, a, b]))
        s = edbatch.concat(x, y)
        close(edbatch.slice(s, 1, 4).value(), np.vstack([a, b])[1:4])
        close(s[1:4].value(), np.vstack([a, b])[1:4])
        close(s[:2].value(), np.vstack([a, b])[:2])
        close(s[-2:].value(), np.vstack([a, b])[-2:])
        m = rand(2, 3)
        close(edbatch.reshape(t.input(m), 3, 2).value(), m.reshape(3, 2, order="F"))
        close(edbatch.reshape(x, 1, 3).value(), a.T)


def test_batched_values_match_unbatched():
    """Many instances in one trace, evaluated together, against numpy one by one."""
    model = edbatch.Model("many")
    W, b = model.add_parameter("W", 4, 4), model.add_parameter("b", 4)
    w, bias = W.values(), b.values()
    engine = edbatch.Engine()
    inputs = [rand(4, 1) for _ in range(20)]
    with edbatch.Trace(engine) as t:
        outs = []
        for i, v in enumerate(inputs):
            h = t.input(v)
            for _ in range(1 + i % 3):
                h = edbatch.tanh(t.param(W) @ h + t.param(b))
            outs.append(h)
        values = [o.value() for o in outs]
    for i, v in enumerate(inputs):
        h = v
        for _ in range(1 + i % 3):
            h = np.tanh(w @ h + bias)
        close(values[i], h)
    stats = engine.stats()
    assert stats["batches"] < stats["nodes"]
    assert set(stats) >= {"nodes", "batches", "lower_bound", "kernel_calls", "bytes_gathered", "flops", "time"}
    assert set(stats["time"]) == {"schedule_ms", "plan_ms", "compile_ms", "execute_ms", "record_backward_ms"}


def test_recording_after_a_read(engine):
    with edbatch.Trace(engine) as t:
        x = t.input([1, 2])
        close((x + x).value(), [[2], [4]])
        y = x * 3.0  # recorded after the first evaluation
        t.run()
        close(y.value(), [[3], [6]])
        assert t.node_count >= 3
        assert "tanh" not in t.dump() and t.dump()


def _huber(d, c):
    e = np.abs(d)
    return np.where(e < c, e * e, c * (2 * e - c))


def _logsumexp(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))


def test_reductions_distances_and_losses(engine):
    """Issue 46's reductions, distances and losses against numpy (recorded as batched ops)."""
    a, b, c = rand(3, 4), rand(3, 4), rand(3, 4)
    u, v = rand(5, 1), rand(5, 1)
    with edbatch.Trace(engine) as t:
        x, y, z, p, q = t.input(a), t.input(b), t.input(c), t.input(u), t.input(v)
        close(edbatch.logsumexp(x, y, z).value(), np.log(np.exp(a) + np.exp(b) + np.exp(c)))
        close(edbatch.logsumexp([x, y]).value(), np.log(np.exp(a) + np.exp(b)))
        close(edbatch.average(x, y, z).value(), (a + b + c) / 3)
        for dim in (0, 1):
            close(edbatch.logsumexp_dim(x, dim).value(), _logsumexp(a.astype(np.float64), dim))
            close(edbatch.sum_dim(x, dim).value(), a.sum(axis=dim, keepdims=True))
            close(edbatch.mean_dim(x, dim).value(), a.mean(axis=dim, keepdims=True))
            close(edbatch.std_dim(x, dim).value(), a.astype(np.float64).std(axis=dim, keepdims=True))
        assert edbatch.dot_product(p, q).scalar() == pytest.approx(float(u[:, 0] @ v[:, 0]), rel=1e-5, abs=1e-6)
        assert edbatch.squared_norm(x).scalar() == pytest.approx(float((a * a).sum()), rel=1e-5)
        assert edbatch.l2_norm(x).scalar() == pytest.approx(float(np.sqrt((a * a).sum())), rel=1e-5)
        assert edbatch.squared_distance(x, y).scalar() == pytest.approx(float(((a - b) ** 2).sum()), rel=1e-5)
        assert edbatch.l1_distance(x, y).scalar() == pytest.approx(float(np.abs(a - b).sum()), rel=1e-5)
        assert edbatch.huber_distance(x, y).scalar() == pytest.approx(float(_huber(a - b, 1.345).sum()), rel=1e-5)
        assert edbatch.huber_distance(x, y, c=0.5).scalar() == pytest.approx(float(_huber(a - b, 0.5).sum()), rel=1e-5)
        others = [i for i in range(5) if i != 2]
        want = sum(max(0.0, 1.0 - u[2, 0] + u[i, 0]) for i in others)
        assert edbatch.hinge(p, 2).scalar() == pytest.approx(want, rel=1e-5, abs=1e-6)
        want = sum(max(0.0, 0.5 - u[2, 0] + u[i, 0]) for i in others)
        assert edbatch.hinge(p, 2, margin=0.5).scalar() == pytest.approx(want, rel=1e-5, abs=1e-6)
        s, r = _sigmoid(a.astype(np.float64)), _sigmoid(b.astype(np.float64))
        want = -(r * np.log(s) + (1 - r) * np.log(1 - s)).sum()
        assert edbatch.binary_log_loss(edbatch.sigmoid(x), edbatch.sigmoid(y)).scalar() == pytest.approx(want, rel=1e-5)
        close(edbatch.pairwise_rank_loss(p, q).value(), np.maximum(0, 1 - u + v))
        close(edbatch.pairwise_rank_loss(p, q, margin=0.25).value(), np.maximum(0, 0.25 - u + v))
        w = t.input([0.3])
        assert edbatch.poisson_loss(w, 4).scalar() == pytest.approx(math.exp(0.3) - 4 * 0.3 + math.lgamma(5), rel=1e-5)
        with pytest.raises(edbatch.UsageError, match=r"edb::sum_dim\(\): dim is 2"):
            edbatch.sum_dim(x, 2)
        with pytest.raises(edbatch.UsageError, match=r"edb::dot_product\(\): argument 2 is 5x1 but argument 1 is 3x4"):
            edbatch.dot_product(x, p)


def test_reduction_gradients(engine):
    model = edbatch.Model("reductions", seed=9)
    W = model.add_parameter("W", 4, 3)
    w = W.values().astype(np.float64)
    with edbatch.Trace(engine) as t:
        g = t.backward(edbatch.sum_elements(edbatch.std_dim(t.param(W), 0)))
        d = w - w.mean(axis=0, keepdims=True)
        np.testing.assert_allclose(g.of(W), d / (4 * np.sqrt((d * d).mean(axis=0, keepdims=True))), rtol=1e-4, atol=1e-6)
    with edbatch.Trace(engine) as t:
        g = t.backward(edbatch.sum_elements(edbatch.logsumexp_dim(t.param(W), 1)))
        e = np.exp(w - w.max(axis=1, keepdims=True))
        np.testing.assert_allclose(g.of(W), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_selections_and_normalisations(engine):
    a, u, gv, bv = rand(3, 4), rand(5, 1), rand(5, 1), rand(5, 1)
    with edbatch.Trace(engine) as t:
        x, p = t.input(a), t.input(u)
        close(edbatch.select_rows(x, [2, 0, 2]).value(), a[[2, 0, 2], :])
        close(edbatch.select_cols(x, [3, 1]).value(), a[:, [3, 1]])
        close(edbatch.pick(x, 1).value(), a[1:2, :])
        assert edbatch.pick(p, 3).scalar() == pytest.approx(float(u[3, 0]))
        d = u.astype(np.float64) - u.mean()
        close(edbatch.layer_norm(p, t.input(gv), t.input(bv)).value(), gv * d / (np.sqrt((d * d).mean()) + 1e-8) + bv)
        g = t.input([1.5])
        close(edbatch.weight_norm(x, g).value(), a * 1.5 / np.sqrt((a.astype(np.float64) ** 2).sum()))
        with pytest.raises(edbatch.UsageError, match=r"edb::select_rows\(\): row 3 is outside x's 3 rows"):
            edbatch.select_rows(x, [3])


def test_argmax_and_kmax_pooling(engine):
    a = rand(4, 6)
    a[:, 2] = [1.0, 3.0, 3.0, 0.0]  # a tie: argmax takes row 1
    model = edbatch.Model("selections", seed=3)
    W = model.add_parameter("W", 4, 6)
    W.set_values(a)
    with edbatch.Trace(engine) as t:
        x = t.param(W)
        onehot = np.zeros_like(a)
        onehot[a.argmax(axis=0), np.arange(6)] = 1
        close(edbatch.argmax(x).value(), onehot)
        order = np.sort(np.argsort(-a, axis=1, kind="stable")[:, :3], axis=1)
        close(edbatch.kmax_pooling(x, 3).value(), np.take_along_axis(a, order, axis=1))
        weights = rand(4, 3)
        g = t.backward(edbatch.sum_elements(edbatch.cmult(edbatch.kmax_pooling(x, 3), t.input(weights))))
        want = np.zeros_like(a)
        np.put_along_axis(want, order, weights, axis=1)
        close(g.of(W), want)
    for gradient, through in (("zero", 0.0), ("straight_through", 1.0)):
        with edbatch.Trace(engine) as t:
            g = t.backward(edbatch.sum_elements(edbatch.cmult(edbatch.argmax(t.param(W), gradient), t.input(a))))
            close(g.of(W), through * a)
    with edbatch.Trace(engine) as t:
        with pytest.raises(edbatch.UsageError, match=r"edb::kmax_pooling\(\): k is 7 but x is 4x6"):
            edbatch.kmax_pooling(t.param(W), 7)
        with pytest.raises(edbatch.UsageError, match=r"expected 'zero' or 'straight_through'"):
            edbatch.argmax(t.param(W), "sideways")


def conv1d(x, f, wide):
    m = f.shape[1]
    if wide:
        x = np.pad(x, ((0, 0), (m - 1, m - 1)))
    return np.stack([(x[:, j:j + m] * f).sum(axis=1) for j in range(x.shape[1] - m + 1)], axis=1)


def test_conv1d_and_maxpool1d(engine):
    a, f = rand(3, 7).astype(np.float64), rand(3, 3).astype(np.float64)
    model = edbatch.Model("convolutions", seed=4)
    X, F = model.add_parameter("X", 3, 7), model.add_parameter("F", 3, 3)
    X.set_values(a.astype(np.float32))
    F.set_values(f.astype(np.float32))
    for wide in (False, True):
        op = edbatch.conv1d_wide if wide else edbatch.conv1d_narrow
        weights = rand(3, 9 if wide else 5)
        with edbatch.Trace(engine) as t:
            y = op(t.param(X), t.param(F))
            close(y.value(), conv1d(a, f, wide))
            g = t.backward(edbatch.sum_elements(edbatch.cmult(y, t.input(weights))))
            # d/dx and d/df of sum(w * conv(x, f)), from the definition.
            m, pad = 3, 2 if wide else 0
            padded = np.pad(a, ((0, 0), (pad, pad)))
            dx, df = np.zeros_like(padded), np.zeros_like(f)
            for j in range(weights.shape[1]):
                dx[:, j:j + m] += weights[:, j:j + 1] * f
                df += weights[:, j:j + 1] * padded[:, j:j + m]
            np.testing.assert_allclose(g.of(X), dx[:, pad:pad + 7], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(g.of(F), df, rtol=1e-4, atol=1e-5)
    with edbatch.Trace(engine) as t:
        y = edbatch.maxpool1d(t.param(X), 3, 2)
        windows = np.stack([a[:, j * 2:j * 2 + 3] for j in range(3)], axis=1)  # 3 x 3 windows x 3
        close(y.value(), windows.max(axis=2))
        g = t.backward(edbatch.sum_elements(y))
        want = np.zeros_like(a)
        for i in range(3):
            for j in range(3):
                want[i, j * 2 + int(windows[i, j].argmax())] += 1
        close(g.of(X), want)
        with pytest.raises(edbatch.UsageError, match=r"edb::maxpool1d\(\): window is 8 but x is 3x7"):
            edbatch.maxpool1d(t.param(X), 8, 1)


def test_softmax_and_log_softmax_of_a_matrix_are_column_wise(engine):
    a = rand(3, 5) * 3
    e = np.exp(a.astype(np.float64) - a.max(axis=0, keepdims=True))
    with edbatch.Trace(engine) as t:
        close(edbatch.softmax(t.input(a)).value(), e / e.sum(axis=0, keepdims=True))
        close(edbatch.log_softmax(t.input(a)).value(), np.log(e / e.sum(axis=0, keepdims=True)))


def test_dropout_variants(engine):
    with edbatch.Trace(engine) as t:
        x = t.input(np.ones((6, 8), np.float32))
        assert edbatch.dropout_dim(x, 0, 0.5).node_id == x.node_id  # inference: x itself
        columns = edbatch.dropout_dim(x, 0, 0.5, training=True, seed=3).value()
        assert set(np.unique(columns)) <= {0.0, 2.0} and (columns == columns[0:1, :]).all()
        rows = edbatch.dropout_dim(x, 1, 0.5, training=True, seed=3).value()
        assert (rows == rows[:, 0:1]).all()
        block = edbatch.block_dropout(x, 0.5, training=True, seed=3).value()
        assert (block == block[0, 0]).all() and block[0, 0] in (0.0, 2.0)
        noisy = edbatch.noise(t.input(np.zeros((4000, 1), np.float32)), 0.5, training=True, seed=4).value()
        assert abs(noisy.std() - 0.5) < 0.05 and abs(noisy.mean()) < 0.05


@pytest.mark.parametrize("a_shape,b_shape", [((3, 4), (1, 1)), ((1, 1), (3, 4)), ((3, 4), (3, 1)), ((1, 4), (3, 4)),
                                             ((3, 1), (1, 4))])
def test_binary_ops_broadcast_as_numpy(engine, a_shape, b_shape):
    a, b = rand(*a_shape), np.abs(rand(*b_shape)) + 0.5
    with edbatch.Trace(engine) as t:
        x, y = t.input(a), t.input(b)
        close((x + y).value(), a + b)
        close((x - y).value(), a - b)
        close((x * y).value(), a * b)
        close((x / y).value(), a / b)
        close(edbatch.max(x, y).value(), np.maximum(a, b))
        close(edbatch.min(y, x).value(), np.minimum(b, a))
        close(edbatch.pow(y, x).value(), np.power(b.astype(np.float64), a).astype(np.float32))


def test_concat_cols(engine):
    a, b = rand(3, 1), rand(3, 2)
    with edbatch.Trace(engine) as t:
        x = edbatch.concat_cols(t.input(a), t.input(b), t.input(a))
        assert x.shape == (3, 4)
        close(x.value(), np.concatenate([a, b, a], axis=1))
        close(edbatch.concat_cols([t.input(b)]).value(), b)
        with pytest.raises(edbatch.UsageError, match="concat_cols"):
            edbatch.concat_cols(t.input(a), t.input(rand(2, 1)))


def test_gradient_control(engine):
    model = edbatch.Model("gradient_control")
    w = model.add_parameter("w", 3)
    for scale, op in [(0.0, edbatch.nobackprop), (-1.0, edbatch.flip_gradient),
                      (0.5, lambda x: edbatch.scale_gradient(x, 0.5))]:
        with edbatch.Trace(engine) as t:
            x = t.param(w)
            y = op(x)
            close(y.value(), w.values())
            g = t.backward(edbatch.sum_elements(edbatch.square(y)) + edbatch.sum_elements(x))
            want = scale * 2 * w.values() + 1
            close(g.of(w), want)
