"""SIGKILL in the middle of a cell, then the same command again: nothing finished is lost or
repeated, the interrupted cell reruns, no run stays RUNNING."""

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.cli import main
from harness.store.tracking import OUTCOME, Store
from conftest import mlflow_client

pytestmark = pytest.mark.slow


def test_sigkill_mid_cell_then_rerun(sweep_file, tmp_path, capsys):
    # The book's CNN on synthetic data: a few seconds per cell, long enough to be killed inside one.
    path = sweep_file("killme", {"sparsity": [0.0, 0.5, 0.8]},
                      base={"model": "cnn", "train_limit": 512, "epochs": 8, "warmup_epochs": 0})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = Store(uri)
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            exp = store.find_experiment("killme")
            runs = store.sweep_runs(exp, "killme") if exp else []
            # A cell seen under a second after it started has most of its 8 epochs still to run,
            # so the kill below lands inside it even on an idle machine.
            fresh = [r for r in runs if r.status == "RUNNING" and time.time() * 1000 - r.start_time < 1000]
            if any(r.status == "FINISHED" for r in runs) and fresh:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the sweep never started a cell after one had finished")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # at once
        proc.wait()
    victim = fresh[0].run_id
    assert [r.status for r in store.sweep_runs(exp, "killme") if r.run_id == victim] == ["RUNNING"], \
        "the kill came after the cell ended"
    finished_before = {r.tags["harness.cell_id"]: r.run_id
                       for r in store.sweep_runs(exp, "killme") if r.status == "FINISHED"}

    capsys.readouterr()
    assert main(command[3:]) == 0   # the same command, here: a rerun needs no second start-up of torch and MLflow
    said = capsys.readouterr().out
    cells = store.sweep_runs(exp, "killme")
    assert len(cells) == 3 and {r.tags[OUTCOME] for r in cells} == {"ok"}
    assert all(r.status == "FINISHED" for r in cells)
    for cell_id, run_id in finished_before.items():  # kept, not rerun
        assert any(r.run_id == run_id for r in cells if r.tags["harness.cell_id"] == cell_id)
    assert "reused" in said
    parents = store.sweep_runs(exp, "killme", parents=True)
    assert sorted(p.status for p in parents) == ["FINISHED", "KILLED"]
    running = mlflow_client(store).search_runs([exp], "attributes.status = 'RUNNING'")
    assert not running
