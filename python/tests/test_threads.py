# Two Python threads: with an engine each (evaluation releases the GIL) and sharing one engine
# (they take turns); the results equal a single thread's. Every wait is bounded (conftest's
# WAIT_SECONDS) and a worker's exception is raised again in the test.
import threading
import time

import numpy as np

import edbatch
from conftest import WAIT_SECONDS, join_threads


def workload(engine, model, offset):
    W, b = model.parameter("W"), model.parameter("b")
    step = edbatch.Cell(16, body=lambda t, h: edbatch.tanh(t.param(W) @ h + t.param(b)))
    results = []
    for round_ in range(5):
        with edbatch.Trace(engine) as t:
            outs = []
            for i in range(30):
                h = t.input(np.full(16, 0.01 * (i + offset + round_), dtype=np.float32))
                for _ in range(1 + i % 4):
                    h = step(t, h)
                outs.append(h)
            t.run()
            results.append(edbatch.concat(outs).value())
    return results


def make_model():
    model = edbatch.Model("threads", seed=3)
    model.add_parameter("W", 16, 16)
    model.add_parameter("b", 16)
    return model


def run_threads(engines, model):
    results, errors = {}, []

    def work(k):
        try:
            results[k] = workload(engines[k], model, k)
        except BaseException as e:  # raised below: a thread's exception would otherwise vanish
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(engines))]
    for thread in threads:
        thread.start()
    join_threads(threads, errors)
    return results


def test_two_threads_with_two_engines():
    model = make_model()
    expected = [workload(edbatch.Engine(), model, k) for k in range(2)]
    got = run_threads([edbatch.Engine(), edbatch.Engine(threads=2)], model)
    for k in range(2):
        for a, b in zip(got[k], expected[k]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_two_threads_sharing_an_engine():
    model = make_model()
    expected = [workload(edbatch.Engine(), model, k) for k in range(2)]
    engine = edbatch.Engine()
    got = run_threads([engine, engine], model)
    for k in range(2):
        for a, b in zip(got[k], expected[k]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_thread_runs_python_while_another_evaluates():
    """While one thread is inside value() (GIL released), another thread's Python code runs."""
    model = make_model()
    engine = edbatch.Engine(executor="reference", policy="sequential")
    W = model.parameter("W")
    inside, ticks, errors = threading.Event(), [], []
    done = threading.Event()

    def evaluate():
        try:
            with edbatch.Trace(engine) as t:
                h = t.input(np.ones(16, dtype=np.float32))
                for _ in range(20000):
                    h = edbatch.tanh(t.param(W) @ h)
                inside.set()
                h.value()
        except BaseException as e:  # raised below, once the waits are over
            errors.append(e)
        finally:
            inside.set()  # a worker that failed before value() must not leave the test waiting
            done.set()

    thread = threading.Thread(target=evaluate)
    thread.start()
    assert inside.wait(WAIT_SECONDS), f"the worker did not start evaluating within {WAIT_SECONDS} s"
    deadline = time.monotonic() + WAIT_SECONDS
    while not done.is_set() and time.monotonic() < deadline:
        ticks.append(1)
        done.wait(0.0005)
    join_threads([thread], errors)
    assert len(ticks) >= 1


def test_policy_training_progress_callback_from_the_released_gil(tmp_path):
    model = make_model()
    W = model.parameter("W")
    engine = edbatch.Engine(policy="fsm")
    traces = []
    for k in range(3):
        t = edbatch.Trace(engine)
        outs = []
        for i in range(8):
            h = t.input(np.full(16, 0.1 * k, dtype=np.float32))
            for _ in range(1 + (i + k) % 3):
                h = edbatch.tanh(t.param(W) @ h)
            outs.append(h)
        edbatch.sum(outs)
        traces.append(t)
    seen = []
    result = engine.train_policy(traces, episodes=20, progress=seen.append)
    assert result["best_batches"] >= result["lower_bound"] > 0
    assert all("episode" in s for s in seen)
    # The training report: greedy's batches beside the table's, and why it stopped.
    assert result["greedy_batches"] >= result["lower_bound"]
    assert result["beats_greedy"] == (result["best_batches"] < result["greedy_batches"])
    assert isinstance(result["stop_reason"], str) and result["stop_reason"]
    assert edbatch.Engine(search_budget_ms=7).options["search_budget_ms"] == 7
    path = tmp_path / "policy.json"
    engine.save_policy(path)
    loaded = edbatch.Engine(policy="fsm", policy_file=path)
    assert loaded.options["policy_file"] == str(path)
