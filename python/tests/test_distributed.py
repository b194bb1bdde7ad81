# edbatch.DataParallel under mpirun (python/tests/data_parallel_worker.py): 2 and 3 ranks train as
# 1 rank does on the same global batches, and the same from run to run. Skipped, saying why, when
# the module was built without MPI or mpirun is missing.
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import edbatch
from conftest import WAIT_SECONDS

WORKER = pathlib.Path(__file__).with_name("data_parallel_worker.py")

pytestmark = pytest.mark.skipif(not edbatch.DataParallel.available() or shutil.which("mpirun") is None,
                                reason="the module was built without MPI, or mpirun is missing")


def train(ranks):
    command = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), sys.executable, str(WORKER)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_SECONDS * 4, env=os.environ)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return json.loads(result.stdout)


def test_ranks_train_as_one_rank():
    one, two, three = train(1), train(2), train(3)
    assert (one["ranks"], two["ranks"], three["ranks"]) == (1, 2, 3)
    assert len(one["losses"]) == 3 * 6
    assert one["losses"][-1] < one["losses"][0]  # it trained
    for other in (two, three):
        np.testing.assert_allclose(other["losses"], one["losses"], rtol=1e-5)
        np.testing.assert_allclose(other["W"], one["W"], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(other["E"], one["E"], rtol=1e-4, atol=1e-6)
    assert two["stats"]["steps"] == 3 * 6 and two["stats"]["bytes"] > 0


def test_the_same_from_run_to_run():
    a, b = train(2), train(2)
    assert a["losses"] == b["losses"] and a["W"] == b["W"] and a["E"] == b["E"]


def test_without_mpirun_one_rank():
    model = edbatch.Model("alone")
    model.add_parameter("W", 2, 2)
    parallel = edbatch.DataParallel(model)
    assert (parallel.rank, parallel.size) == (0, 1)
    assert parallel.share(0, 5) == (0, 5)


DIVERGED = """
import pathlib, sys
import numpy as np, edbatch
model = edbatch.Model("m", seed=1)
W = model.add_parameter("W", 2, 2)
parallel = edbatch.DataParallel(model)
if parallel.rank == 1:
    W.set_values(W.values() + np.float32(1e-3))
try:
    parallel.check_weights("before the save")
except edbatch.UsageError as error:
    outcome = str(error)
else:
    outcome = "no error"
pathlib.Path(sys.argv[1], f"rank{parallel.rank}.txt").write_text(outcome)
"""


def test_diverged_weights_are_an_error_on_every_rank(tmp_path):
    # What edb-run checks before --save: weights that differ on one rank are refused on all of them.
    # Each rank writes its outcome to a file of its own: mpirun forwards the ranks' stdout in chunks
    # that may split and join lines, so stdout cannot say which rank printed what.
    command = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", sys.executable, "-c", DIVERGED,
               str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_SECONDS * 4, env=os.environ)
    assert result.returncode == 0, result.stderr[-4000:]
    for rank in range(2):
        outcome = (tmp_path / f"rank{rank}.txt").read_text()
        assert outcome.startswith("edb::DataParallel: the model's values before the save differ between ranks: "
                                  "rank 1 has 'checksum "), (rank, outcome)
