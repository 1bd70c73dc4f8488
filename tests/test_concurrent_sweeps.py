"""Two ordinary `harness sweep` commands started together on one store: claims are always on, so
every cell runs exactly once between them, and each invocation says which cells the other ran."""

import subprocess
import sys

import pytest
from conftest import mlflow_client

from harness.store import Store
from harness.store.tracking import CELL_ID, OUTCOME

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_two_sweeps_started_together_run_each_cell_once(sweep_file, tmp_path):
    # The book's CNN on synthetic data: a second or two a cell, so the two commands overlap.
    path = sweep_file("together", {"sparsity": [0.0, 0.2, 0.4, 0.6]},
                      base={"model": "cnn", "train_limit": 256, "epochs": 2, "warmup_epochs": 0,
                            "pruning_backend": "torch-pruning"})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-2000:]
        assert "locked" not in err
    store = Store(uri)
    cells = store.sweep_runs(store.find_experiment("together"), "together")
    ids = [r.tags[CELL_ID] for r in cells]
    assert len(ids) == 4 and len(set(ids)) == 4, "a cell ran twice or not at all"
    assert all(r.status == "FINISHED" and r.tags[OUTCOME] == "ok" for r in cells)
    # Each command ran some cells and found the others busy or already done: none ran them all.
    ran = [out.count(" ok ") for out, _ in outputs]
    assert sum(ran) == 4, outputs
    running = mlflow_client(store).search_runs([store.find_experiment("together")], "attributes.status = 'RUNNING'")
    assert not running
