# `cmake --install` puts the module and its stubs into the prefix's site-packages path, and the
# installed module imports and runs from there (in a fresh interpreter, away from the build tree).
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import WAIT_SECONDS, build_dir


def test_the_installed_module_imports_from_the_prefix(tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake not found")
    build = build_dir()
    prefix = tmp_path / "prefix"
    subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True,
                   timeout=WAIT_SECONDS)
    modules = list(prefix.rglob("edbatch*.so"))
    assert len(modules) == 1, modules
    site = modules[0].parent
    assert (site / "edbatch.pyi").exists()
    cache = (build / "CMakeCache.txt").read_text()
    [install_dir] = [line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("EDB_PYTHON_INSTALL_DIR:")]
    assert site == prefix / install_dir
    script = ("import edbatch, sys\n"
              "assert edbatch.__file__.startswith(sys.argv[1]), edbatch.__file__\n"
              "with edbatch.Trace(edbatch.Engine()) as t:\n"
              "    print(float(edbatch.tanh(t.input([0.5])).scalar()))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", script, str(site)], check=True, capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=WAIT_SECONDS)
    assert float(out.stdout) == pytest.approx(0.46211716)
