"""Shared fixtures: a real SQLite MLflow store in a temporary folder, and tiny sweep files that
run the real engine on the tiny CNN and synthetic data in a second or two."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    from harness.tracking import Store

    return Store(f"sqlite:///{tmp_path_factory.mktemp('mlruns') / 'mlflow.db'}")


TINY_BASE = {
    "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 256, "test_limit": 128,
    "epochs": 2, "warmup_epochs": 1, "batch_size": 32, "lr": 0.01, "threads": 1,
}


def write_sweep(folder: Path, name: str, grid: dict, base: dict | None = None, repeats: int = 1,
                published: str = "") -> Path:
    """A sweep file like the shipped ones, shrunk to the tiny CNN on synthetic data."""
    def toml(value):
        return repr(value).replace("'", '"').replace("True", "true").replace("False", "false")

    base = {**TINY_BASE, **(base or {})}
    text = textwrap.dedent(f"""\
        name = "{name}"
        title = "test sweep {name}"
        experiment = "pruning"
        repeats = {repeats}
        [base]
        """) + "".join(f"{k} = {toml(v)}\n" for k, v in base.items())
    text += "[grid]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in grid.items())
    text += "[scales.smoke]\nepochs = 1\n"
    text += '[report]\nx = "sparsity"\nbaseline = { sparsity = 0.0 }\n'
    text += 'metrics = ["train_time_s", "test_accuracy", "param_count"]\n' + published
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def sweep_file(tmp_path):
    def make(name, grid, **kwargs):
        return write_sweep(tmp_path, name, grid, **kwargs)
    return make
