# Runs every ```python block of docs/python.md, each in a fresh interpreter.
import os
import pathlib
import re
import subprocess
import sys

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.S | re.M)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_guide_block(index, tmp_path):
    result = subprocess.run([sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True,
                            env=os.environ, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, f"block {index + 1} of {GUIDE}:\n{BLOCKS[index]}\n{result.stderr}"
