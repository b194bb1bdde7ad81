# engine.stats()["caches"]: every cache that grows with the structures seen, within its bound
# (counts, not resident memory), and cache_entries sets the per-engine bounds.
import numpy as np
import pytest

import edbatch

CACHES = {"signatures", "search_schedules", "linked_kernels", "kernel_memory", "jit_kernels", "scratch",
          "cell_records", "cell_kernels", "call_expansions", "device_kernels"}
FIELDS = {"entries", "bytes", "max_entries", "max_bytes", "evictions"}


def record_structure(engine, W, dim, depth):
    """A chain of `depth` ops over inputs of `dim` rows: each (dim, depth) is a structure of its own."""
    with edbatch.Trace(engine) as t:
        h = t.input(np.linspace(-1, 1, dim, dtype=np.float32))
        for k in range(depth):
            h = edbatch.tanh(h * 0.5 + 0.25) if k % 2 else edbatch.sigmoid(h) - 0.5
        out = t.param(W) @ edbatch.slice(h, 0, 2)
        return out.value()


def within_bounds(caches):
    for name, cache in caches.items():
        if cache["max_entries"]:
            assert cache["entries"] <= cache["max_entries"], name
        if cache["max_bytes"]:
            assert cache["bytes"] <= cache["max_bytes"], name


@pytest.mark.parametrize("executor", ["batched", "jit"])
def test_caches_stay_within_cache_entries(executor, tmp_path):
    model = edbatch.Model("caches")
    W = model.add_parameter("W", 3, 2)
    engine = edbatch.Engine(executor=executor, policy="search", search_budget_ms=1, cache_entries=2,
                            cache_directory=tmp_path)
    assert engine.options["cache_entries"] == 2
    reference = edbatch.Engine(executor="reference", policy="sequential")
    for s in range(40):
        dim, depth = 2 + s % 20, 1 + s % 3
        np.testing.assert_allclose(record_structure(engine, W, dim, depth), record_structure(reference, W, dim, depth),
                                   rtol=1e-5, atol=1e-6)
        caches = engine.stats()["caches"]
        assert set(caches) == CACHES
        assert all(set(cache) == FIELDS for cache in caches.values())
        within_bounds(caches)
    caches = engine.stats()["caches"]
    assert caches["signatures"]["max_entries"] == 16 * 2
    assert caches["signatures"]["evictions"] > 0  # 20 dimensions of several types each: it started again
    assert caches["search_schedules"]["max_entries"] == 2
    assert caches["search_schedules"]["evictions"] > 0
    assert caches["scratch"]["max_bytes"] == 64 << 20
    if executor == "jit":
        assert caches["jit_kernels"]["max_entries"] == 2
        assert caches["jit_kernels"]["evictions"] > 0
        assert caches["linked_kernels"]["entries"] > 0
    engine.reset_stats()  # sizes are read afresh, not summed: a reset leaves them
    assert engine.stats()["caches"]["signatures"]["max_entries"] == 32


def test_cache_entries_default_and_at_least_one():
    assert edbatch.Engine().options["cache_entries"] == 1024
    assert edbatch.Engine().stats()["caches"]["signatures"]["max_entries"] == 16 * 1024
    with pytest.raises(edbatch.UsageError, match="cache_entries"):
        edbatch.Engine(cache_entries=0)


def test_max_trace_nodes_below_zero_is_refused():
    with pytest.raises(edbatch.UsageError, match="max_trace_nodes must be 0 .* or more, got -5"):
        edbatch.Engine(max_trace_nodes=-5)
    assert edbatch.Engine(max_trace_nodes=0).options["max_trace_nodes"] == 0
