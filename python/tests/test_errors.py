# Every error path raises a Python exception with edbatch's message; nothing crashes.
import gc

import numpy as np
import pytest

import edbatch


def test_exception_classes():
    assert issubclass(edbatch.UsageError, ValueError)
    assert issubclass(edbatch.NumericError, ArithmeticError)
    assert issubclass(edbatch.InternalError, RuntimeError)


def test_shape_mismatch_names_the_op():
    model = edbatch.Model("m")
    W = model.add_parameter("W", 4, 3)
    with edbatch.Trace(edbatch.Engine()) as t:
        with pytest.raises(edbatch.UsageError, match=r"^edb::matmul\(\)"):
            t.param(W) @ t.input([1, 2])
        with pytest.raises(ValueError, match="edb::affine"):
            edbatch.affine(t.input([1, 2, 3, 4]), t.param(W), t.input([1.0]))
        with pytest.raises(edbatch.UsageError):
            t.input([1, 2]) + t.input([1, 2, 3])
        with pytest.raises(edbatch.UsageError):
            edbatch.slice(t.input([1, 2]), 1, 5)
        with pytest.raises(edbatch.UsageError):
            t.input([1, 2])[::2]
        with pytest.raises(edbatch.UsageError):
            edbatch.reshape(t.input([1, 2]), 3, 1)
        with pytest.raises(edbatch.UsageError):
            edbatch.pick_neg_log_softmax(t.input([1, 2]), 2)
        with pytest.raises(edbatch.UsageError):
            edbatch.sum()
        with pytest.raises(edbatch.UsageError):
            t.input([1, 2]).scalar()
        with pytest.raises(edbatch.UsageError):
            t.input([1.0]) / 0.0


def test_inputs_refuse_other_dtypes_and_shapes():
    with edbatch.Trace(edbatch.Engine()) as t:
        with pytest.raises(edbatch.UsageError, match="float32.*float64"):
            t.input(np.array([1.0, 2.0]))
        with pytest.raises(edbatch.UsageError, match="int64"):
            t.input(np.array([1, 2]))
        with pytest.raises(edbatch.UsageError, match="2 dimensions|dimensions"):
            t.input(np.zeros((2, 2, 2), dtype=np.float32))
        with pytest.raises(edbatch.UsageError, match="dimensions"):
            t.input(np.array(1.0, dtype=np.float32))
        with pytest.raises(edbatch.UsageError, match="list of numbers"):
            t.input("abc")
        with pytest.raises(edbatch.UsageError, match="list of numbers"):
            t.input(["a", "b"])
        with pytest.raises(edbatch.UsageError):
            t.input([])
        with pytest.raises(edbatch.UsageError):
            t.input([[1, 2], [3]])
        with pytest.raises(TypeError):
            t.input([1]) + "x"


def test_parameter_values_checked():
    model = edbatch.Model("m")
    W = model.add_parameter("W", 2, 3)
    with pytest.raises(edbatch.UsageError, match="2x3"):
        W.set_values(np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(edbatch.UsageError, match="float64"):
        W.set_values(np.zeros((2, 3)))
    E = model.add_lookup("E", 4, 2)
    with pytest.raises(edbatch.UsageError):
        E.set_values(np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(edbatch.UsageError, match="already has"):
        model.add_parameter("W", 1, 1)
    with pytest.raises(edbatch.UsageError):
        model.add_parameter("V", 0, 1)
    with pytest.raises(edbatch.UsageError):
        model.parameter("missing")
    with pytest.raises(edbatch.UsageError):
        edbatch.Model("a/b")
    with edbatch.Trace(edbatch.Engine()) as t:
        with pytest.raises(edbatch.UsageError, match="outside"):
            t.lookup(E, 4)
        with pytest.raises(edbatch.UsageError):
            t.lookup(E, -1)


def test_stale_expressions_raise():
    engine = edbatch.Engine()
    with edbatch.Trace(engine) as t:
        y = edbatch.tanh(t.input([1.0]))
    assert not t.active
    with pytest.raises(edbatch.UsageError, match="finished"):
        y.value()
    with pytest.raises(edbatch.UsageError, match="finished"):
        y + y
    with pytest.raises(edbatch.UsageError):
        t.input([1.0])
    with pytest.raises(edbatch.UsageError):
        t.run()
    assert "finished" in repr(y)
    t2 = edbatch.Trace(engine)
    x = t2.input([1.0])
    t2.finish()
    t2.finish()  # twice is fine
    with pytest.raises(edbatch.UsageError):
        x.rows


def test_mixing_traces_is_an_error():
    engine = edbatch.Engine()
    with edbatch.Trace(engine) as a, edbatch.Trace(engine) as b:
        with pytest.raises(edbatch.UsageError):
            a.input([1.0]) + b.input([1.0])


def test_dropped_objects_stay_safe():
    """A parameter's model, an expression's engine: kept alive by what uses them."""
    def make():
        model = edbatch.Model("temp")
        return model.add_parameter("W", 2, 2)

    W = make()
    gc.collect()
    assert W.shape == (2, 2)
    t = edbatch.Trace(edbatch.Engine())
    x = t.param(W) @ t.input([1, 1])
    del t
    gc.collect()
    with pytest.raises(edbatch.UsageError):  # the trace ended when it was dropped
        x.value()


def test_bad_engine_options():
    with pytest.raises(edbatch.UsageError, match="policy"):
        edbatch.Engine(policy="fastest")
    with pytest.raises(edbatch.UsageError):
        edbatch.Engine(executor="nope")
    with pytest.raises(edbatch.UsageError):
        edbatch.Engine(device="tpu")
    with pytest.raises(TypeError):
        edbatch.Engine("greedy")  # keyword-only
    with pytest.raises(edbatch.UsageError):
        edbatch.Engine(policy="fsm", policy_file="/nonexistent/policy.json")


def test_node_limit():
    engine = edbatch.Engine(max_trace_nodes=3)
    with edbatch.Trace(engine) as t:
        x = t.input([1.0])
        x = x + x
        with pytest.raises(edbatch.UsageError, match="max_trace_nodes"):
            for _ in range(5):
                x = x + x


def test_numeric_error_with_check_finite():
    engine = edbatch.Engine(check_finite=True)
    with edbatch.Trace(engine) as t:
        x = t.input(np.array([1.0, 0.0], dtype=np.float32))
        y = edbatch.log_softmax(x * 1e30 * 1e30)  # inf - inf: NaN
        with pytest.raises(edbatch.NumericError):
            y.value()


def test_bad_files(tmp_path):
    model = edbatch.Model("m")
    model.add_parameter("W", 2, 2)
    with pytest.raises(edbatch.UsageError, match="cannot open|missing|No such"):
        model.load(tmp_path / "missing.bin")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a model file at all")
    with pytest.raises(edbatch.UsageError, match=str(bad)):
        model.load(bad)
    model.save(tmp_path / "ok.bin")
    other = edbatch.Model("m")
    other.add_parameter("W", 3, 2)
    with pytest.raises(edbatch.UsageError):
        other.load(tmp_path / "ok.bin")
    optimizer = edbatch.Optimizer(model)
    with pytest.raises(edbatch.UsageError):
        optimizer.load(bad)
    engine = edbatch.Engine(policy="fsm")
    with pytest.raises(edbatch.UsageError):
        edbatch.Engine(policy="fsm", policy_file=bad)
    del engine


def test_optimizer_errors():
    model = edbatch.Model("m")
    W = model.add_parameter("W", 2, 2)
    with pytest.raises(edbatch.UsageError):
        edbatch.Optimizer(model, kind="rmsprop")
    with pytest.raises(edbatch.UsageError):
        edbatch.Optimizer(model, learning_rate=-1.0)
    with pytest.raises(TypeError):
        edbatch.Optimizer(model, lr=0.1)
    other = edbatch.Model("other")
    V = other.add_parameter("V", 2, 2)
    with edbatch.Trace(edbatch.Engine()) as t:
        g = t.backward(edbatch.pick_neg_log_softmax(t.param(V) @ t.input([1, 2]), 0))
        with pytest.raises(edbatch.UsageError):
            edbatch.Optimizer(model).step(g)  # gradients of another model's parameter
        with pytest.raises(edbatch.UsageError):
            t.backward(t.param(V))  # not 1x1
    del W


def test_wrong_argument_types_are_type_errors():
    with edbatch.Trace(edbatch.Engine()) as t:
        with pytest.raises(TypeError):
            edbatch.tanh(1.0)
        with pytest.raises(TypeError):
            edbatch.sum([t.input([1.0]), 2.0])
        with pytest.raises(TypeError):
            t.param("W")


def test_expr_is_made_by_traces_only():
    with pytest.raises(TypeError):
        edbatch.Expr()
    with edbatch.Trace(edbatch.Engine()) as t:
        x = t.input([1.0, 2.0])
        assert isinstance(x, edbatch.Expr) and type(x) is edbatch.Expr
        with pytest.raises(TypeError):
            x @ 3
        with pytest.raises(TypeError):
            x + None
        with pytest.raises(TypeError):
            edbatch.affine(x, x, "x")
        with pytest.raises(TypeError):
            edbatch.pick_neg_log_softmax(x, "a")
        with pytest.raises(TypeError):
            t.lookup(x, 1)
        with pytest.raises(TypeError):
            edbatch.affine(x, x, x, label=3)
