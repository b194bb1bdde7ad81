# Shared by the Python tests: the module under test comes from PYTHONPATH (scripts/test.sh sets
# <build>/python); its build tree gives edb-run and the install step, ../shared/data the data.
import os
import pathlib

import pytest

import edbatch

REPO = pathlib.Path(__file__).resolve().parents[2]
# Subprocesses (the examples, the guide's blocks) import the same module from any directory.
MODULE_DIR = str(pathlib.Path(edbatch.__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join([MODULE_DIR, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


def build_dir():
    """The build tree the imported module came from (<build>/python/edbatch*.so)."""
    return pathlib.Path(edbatch.__file__).resolve().parent.parent


@pytest.fixture
def data_dir():
    path = pathlib.Path(os.environ.get("EDB_SHARED_DATA_DIR", REPO.parent / "shared" / "data"))
    if not (path / "sst-like.txt").exists():
        pytest.skip(f"no sst-like.txt in {path}")
    return path


@pytest.fixture
def edb_run():
    path = pathlib.Path(os.environ.get("EDB_RUN_BINARY", build_dir() / "tools" / "edb-run"))
    if not path.exists():
        pytest.fail(f"edb-run not found at {path} (set EDB_RUN_BINARY)")
    return path
