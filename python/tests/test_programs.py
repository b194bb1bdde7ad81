# edbatch.run_instances: generators that branch on their own values, run together in one trace,
# against each instance run alone under the reference executor; the error cases.
import random

import numpy as np
import pytest

import edbatch


def make_model():
    model = edbatch.Model("programs", seed=3)
    model.add_parameter("W", 4, 4)
    model.add_parameter("b", 4)
    model.add_lookup("E", 10, 4)
    return model


def program(t, model, seed, log):
    """Random ops with random branch points on an awaited scalar: early exit, a loop, two paths."""
    rng = random.Random(seed)
    W, b, E = model.parameter("W"), model.parameter("b"), model.lookup("E")
    h = t.lookup(E, rng.randrange(10))
    first = None
    for _ in range(1 + rng.randrange(5)):
        h = edbatch.tanh(edbatch.affine(t.param(b), t.param(W), h)) if rng.random() < 0.5 else edbatch.sigmoid(h) - 0.5
        first = h if first is None else first
        if rng.random() < 0.6:
            v = float((yield edbatch.sum_elements(h))[0, 0])
            log.append(v)
            if v < -0.3:
                break
            for _ in range(int(abs(v) * 10) % 3):
                h = edbatch.tanh(h * 2.0 - 0.1)
            if v > 0.3:
                h = edbatch.relu(h) - 0.25
            again = yield first  # computed in an earlier round: sent at once
            log.append(float(again[0, 0]))
    result = yield h
    return result


def run_alone(model, seed):
    engine = edbatch.Engine(executor="reference", policy="sequential")
    log = []
    with edbatch.Trace(engine) as t:
        gen = program(t, model, seed, log)
        value = None
        try:
            while True:
                value = gen.send(value).value()
        except StopIteration as stop:
            return stop.value, log


@pytest.mark.parametrize("executor", ["reference", "batched", "jit"])
def test_instances_match_each_alone_under_the_reference(executor):
    model = make_model()
    expected = [run_alone(model, seed) for seed in range(20)]
    engine = edbatch.Engine(executor=executor, verify=True)
    logs = [[] for _ in range(20)]
    report = {}
    with edbatch.Trace(engine) as t:
        results = edbatch.run_instances(t, [program(t, model, seed, logs[seed]) for seed in range(20)], report=report)
    assert report["finished"] == 20 and report["failed"] == 0 and report["first_failed"] == -1
    for seed, (value, log) in enumerate(expected):
        if any(abs(abs(v) - 0.3) < 1e-3 for v in log):
            continue  # so near a boundary that the executors may branch apart
        np.testing.assert_allclose(logs[seed], log, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(results[seed], value, rtol=1e-4, atol=1e-5)
    # Batched across instances: far fewer batches than nodes.
    if executor != "reference":
        assert engine.stats()["batches"] * 2 < engine.stats()["nodes"]


def counts_down(t, n, fails):
    x = t.input([float(n)])
    while float((yield x)[0, 0]) > 0.5:
        x = x - 1.0
    if fails:
        raise KeyError(f"instance {n} gave up")
    return n


def test_rounds_and_an_exception_ending_its_instance():
    engine = edbatch.Engine(executor="jit")
    report = {}
    with edbatch.Trace(engine) as t:
        results = edbatch.run_instances(t, [counts_down(t, n, n == 2) for n in range(5)], rethrow=False, report=report)
    assert report == {"rounds": 5, "finished": 4, "failed": 1, "first_failed": 2}
    assert results[:2] == [0, 1] and results[3:] == [3, 4]
    assert isinstance(results[2], KeyError)
    with edbatch.Trace(engine) as t:
        with pytest.raises(KeyError, match="instance 1 gave up"):
            edbatch.run_instances(t, [counts_down(t, n, n == 1) for n in range(3)])


def test_yielding_another_traces_expression_or_a_non_expression():
    engine = edbatch.Engine(executor="batched")
    with edbatch.Trace(engine) as other, edbatch.Trace(engine) as t:
        foreign = edbatch.tanh(other.input([1.0]))

        def awaits(e):
            return (yield e)

        def catches(e):
            try:
                yield e
            except edbatch.UsageError as error:
                return str(error)

        def yields_a_number():
            yield 3

        results = edbatch.run_instances(t, [awaits(edbatch.tanh(t.input([0.0]))), catches(foreign), awaits(foreign),
                                            yields_a_number()], rethrow=False)
        np.testing.assert_allclose(results[0], [[0.0]])
        assert "yielded an expression of another trace" in results[1]
        assert isinstance(results[2], edbatch.UsageError)
        assert isinstance(results[3], TypeError) and "yielded a int" in str(results[3])
        with pytest.raises(edbatch.UsageError, match="not a generator"):
            edbatch.run_instances(t, [lambda: None])


def test_round_limit_and_evaluation_errors():
    engine = edbatch.Engine(executor="batched", check_finite=True)

    def forever(t):
        x = t.input([1.0])
        while True:
            x = x + 1.0
            yield x

    with edbatch.Trace(engine) as t:
        gens = [forever(t), forever(t)]
        with pytest.raises(edbatch.UsageError, match=r"instance 0 \(and 1 more\) had not finished after 20"):
            edbatch.run_instances(t, gens, max_rounds=20)
        assert all(g.gi_frame is None for g in gens)  # closed

    def awaits(e):
        yield e

    with edbatch.Trace(engine) as t:
        with pytest.raises(edbatch.NumericError):
            edbatch.run_instances(t, [awaits(edbatch.log(t.input([-1.0]))), awaits(t.input([1.0]) * 2.0)])


def test_an_interrupt_ends_the_run_and_closes_the_others():
    engine = edbatch.Engine(executor="reference")
    closed = []

    def waits(t, i):
        try:
            yield t.input([float(i)])
            if i == 1:
                raise KeyboardInterrupt
            yield t.input([1.0]) * 2.0
        finally:
            closed.append(i)

    with edbatch.Trace(engine) as t:
        with pytest.raises(KeyboardInterrupt):
            edbatch.run_instances(t, [waits(t, i) for i in range(3)])
    assert sorted(closed) == [0, 1, 2]


def test_sub_programs_compose_with_yield_from():
    model = make_model()
    W = model.parameter("W")

    def step(t, h, limit):
        steps = 0
        while True:
            h = edbatch.tanh(t.param(W) @ h) + 0.05
            steps += 1
            if float((yield h)[0, 0]) <= limit or steps == 5:
                return h, steps

    def program(t, i):
        h, counts = t.input([0.1 * i, 0.3, -0.2, 0.5]), []
        for _ in range(1 + i % 3):
            h, steps = yield from step(t, h, 0.1 * (i % 4))
            counts.append(steps)
        return counts

    engine, reference = edbatch.Engine(executor="jit"), edbatch.Engine(executor="reference")
    report = {}
    with edbatch.Trace(engine) as t:
        together = edbatch.run_instances(t, [program(t, i) for i in range(10)], report=report)
    alone = []
    for i in range(10):
        with edbatch.Trace(reference) as t:
            alone += edbatch.run_instances(t, [program(t, i)])
    assert together == alone
    assert report["rounds"] == max(sum(counts) for counts in alone)
