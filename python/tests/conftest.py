# Shared by the Python tests: the module under test comes from PYTHONPATH (ctest's python.pytest
# sets <build>/python); its build tree gives edb-run and the install step, ../shared/data the data.
# The run gets a kernel cache of its own, so no test reads or writes ~/.cache/edbatch or finds
# kernels another run left; and WAIT_SECONDS bounds every wait on a thread or a subprocess.
import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

# Set before the module is imported and any engine made: engines read it when first made.
CACHE_DIR = tempfile.mkdtemp(prefix="edbatch-pytest-kernels-")
os.environ["EDB_CACHE_DIR"] = CACHE_DIR
atexit.register(shutil.rmtree, CACHE_DIR, ignore_errors=True)

import edbatch  # noqa: E402

# Far beyond any wait's normal time on a loaded machine: reaching it fails the test, not the run.
WAIT_SECONDS = 600

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


def join_threads(threads, errors):
    """Joins `threads` within WAIT_SECONDS each, then re-raises the first exception a worker put
    in `errors`, or fails naming the threads still running."""
    for thread in threads:
        thread.join(WAIT_SECONDS)
    if errors:
        raise errors[0]
    alive = [thread.name for thread in threads if thread.is_alive()]
    assert not alive, f"threads still running after {WAIT_SECONDS} s: {alive}"
