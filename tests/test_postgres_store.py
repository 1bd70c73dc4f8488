"""A tracking store that is a PostgreSQL database itself (`--tracking-uri postgresql://...`, no
`mlflow server` between): a sweep records its cells there, the same command reuses them, the report
reads them back, and two workers share the store. The same checks run on SQLite, so the PostgreSQL
ones differ only in the store (they skip without a server, and fail under CI, which has one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import experiment_runs
from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, PARENT


@pytest.fixture(params=["sqlite", "postgresql"])
def tracking_uri(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return request.getfixturevalue("postgres_db")


def _cells_and_parents(uri: str, experiment: str) -> tuple[list, list]:
    runs = experiment_runs(uri, experiment)
    return [r for r in runs if PARENT in r.data.tags], [r for r in runs if PARENT not in r.data.tags]


def test_a_sweep_records_reuses_and_reports_its_cells(tracking_uri, sweep_file, tmp_path, monkeypatch, capsys):
    # A database store has no folder of its own: MLflow keeps its artifacts under ./mlruns of the
    # working folder, here the test's.
    monkeypatch.chdir(tmp_path)
    path = sweep_file("dbstore", {"sparsity": [0.0, 0.5]})
    args = ["sweep", str(path), "--tracking-uri", tracking_uri, "--storage", f"sqlite:///{tmp_path / 'optuna.db'}",
            "--no-progress"]
    assert main(args) == 0
    cells, parents = _cells_and_parents(tracking_uri, "dbstore")
    assert sorted(float(r.data.params["sparsity"]) for r in cells) == [0.0, 0.5]
    assert all(r.info.status == "FINISHED" and r.data.tags[OUTCOME] == "ok" for r in cells)
    assert all(r.data.metrics["train_time_s"] > 0 and 0 <= r.data.metrics["test_accuracy"] <= 1 for r in cells)
    assert [p.info.status for p in parents] == ["FINISHED"]
    client = MlflowClient(tracking_uri)
    config = json.loads(Path(client.download_artifacts(cells[0].info.run_id, "config.json", str(tmp_path))).read_text())
    assert config["sparsity"] == float(cells[0].data.params["sparsity"])
    first = {r.data.tags[CELL_ID]: r.info.run_id for r in cells}

    capsys.readouterr()
    assert main(args) == 0  # the same command: every cell reused, none run again
    assert capsys.readouterr().out.count("reused") >= 1
    cells, parents = _cells_and_parents(tracking_uri, "dbstore")
    assert {r.data.tags[CELL_ID]: r.info.run_id for r in cells} == first and len(parents) == 1   # a rerun that reuses every cell makes no parent

    out = tmp_path / "report"
    assert main(["report", str(path), "--tracking-uri", tracking_uri, "--out", str(out)]) == 0
    assert "| sparsity |" in (out / "dbstore-full.md").read_text()   # named per scale: the CLI's default, full


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_share_a_postgresql_tracking_store(postgres_db, sweep_file, tmp_path):
    path = sweep_file("dbshared", {"sparsity": [0.0, 0.2, 0.4, 0.6]}, base={"pruning_backend": "torch-pruning"})
    done = subprocess.run([sys.executable, "-m", "harness", "sweep", str(path), "--workers", "2", "--tracking-uri",
                           postgres_db, "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cells, parents = _cells_and_parents(postgres_db, "dbshared")
    ids = [r.data.tags[CELL_ID] for r in cells]
    assert len(ids) == 4 and len(set(ids)) == 4, "a cell ran twice or not at all"
    assert {r.data.tags[OUTCOME] for r in cells} == {"ok"}
    assert [p.info.status for p in parents] == ["FINISHED"]
