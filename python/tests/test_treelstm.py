# The Python TreeLSTM (python/examples/treelstm.py) against the C++ sample (edb-run treelstm):
# the same parameters, seed, vocabulary and traces give the same summed loss, and the same
# training losses epoch by epoch.
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import WAIT_SECONDS

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "treelstm.py"


def python_run(*args):
    out = subprocess.run([sys.executable, str(EXAMPLE), *args, "--json"], check=True, capture_output=True,
                         text=True, env=os.environ, timeout=WAIT_SECONDS)
    return json.loads(out.stdout)


def cpp_run(edb_run, *args):
    out = subprocess.run([str(edb_run), "treelstm", *args, "--json"], check=True, capture_output=True, text=True,
                         timeout=WAIT_SECONDS)
    return json.loads(out.stdout)


@pytest.mark.parametrize("flags", [["--limit", "120"], ["--limit", "50", "--batch", "16", "--hidden", "32",
                                                        "--embed", "24", "--seed", "7", "--cells", "off"]])
def test_inference_loss_equals_the_cpp_sample(edb_run, data_dir, flags):
    flags = ["--data", str(data_dir / "sst-like.txt"), "--repeat", "1", *flags]
    py, cpp = python_run(*flags), cpp_run(edb_run, *flags)
    assert py["instances"] == cpp["instances"]
    assert py["loss"] == pytest.approx(cpp["loss"], rel=1e-6)
    assert py["stats"]["nodes"] == cpp["nodes"]


def test_training_losses_equal_the_cpp_sample(edb_run, data_dir):
    flags = ["--data", str(data_dir / "sst-learnable.txt"), "--limit", "120", "--train", "--epochs", "2",
             "--hidden", "16", "--embed", "16", "--batch", "32"]
    py, cpp = python_run(*flags), cpp_run(edb_run, *flags)
    assert py["train_instances"] == cpp["train_instances"] and py["heldout_instances"] == cpp["heldout_instances"]
    assert py["initial"]["heldout_loss"] == pytest.approx(cpp["initial"]["heldout_loss"], rel=1e-6)
    for p, c in zip(py["epochs"], cpp["epochs"], strict=True):
        assert p["train_loss"] == pytest.approx(c["train_loss"], rel=1e-5)
        assert p["heldout_loss"] == pytest.approx(c["heldout_loss"], rel=1e-5)
        assert p["heldout_accuracy"] == c["heldout_accuracy"]


def test_sgd_training_and_the_plain_output(edb_run, data_dir):
    flags = ["--data", str(data_dir / "sst-like.txt"), "--limit", "40", "--train", "--optimizer", "sgd",
             "--momentum", "0.5", "--hidden", "8", "--embed", "8", "--batch", "8"]
    py, cpp = python_run(*flags), cpp_run(edb_run, *flags)
    assert py["epochs"][0]["train_loss"] == pytest.approx(cpp["epochs"][0]["train_loss"], rel=1e-5)
    text = subprocess.run([sys.executable, str(EXAMPLE), *flags], check=True, capture_output=True, text=True,
                          timeout=WAIT_SECONDS).stdout
    assert "epoch 1: train loss" in text


def test_help_and_bad_data(tmp_path):
    help_text = subprocess.run([sys.executable, str(EXAMPLE), "--help"], check=True, capture_output=True,
                               text=True, timeout=WAIT_SECONDS).stdout
    for flag in ("--data", "--limit", "--batch", "--hidden", "--embed", "--train", "--epochs", "--seed", "--json"):
        assert flag in help_text
    bad = tmp_path / "bad.txt"
    bad.write_text("(3 (2 w1) (1 w2))\n(9 w1)\n")
    result = subprocess.run([sys.executable, str(EXAMPLE), "--data", str(bad)], capture_output=True, text=True,
                            timeout=WAIT_SECONDS)
    assert result.returncode != 0 and f"{bad}:2: expected label 0-4" in result.stderr
