"""The committed results/cpu-2core: its pages are exactly what `harness report` writes from the store
committed beside them (byte for byte, the Markdown and CSV files; so no figure on the page is edited
by hand or left behind by a change of the report's code), and a store the harness commits is left
in rollback-journal mode, so reading it writes nothing beside it."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess

import pytest

from harness.folders import REPO_ROOT
from harness.store.tracking import Store

RESULTS = REPO_ROOT / "results" / "cpu-2core"
STORE_URI = "sqlite:///results/cpu-2core/store/mlflow.db"   # relative, as the committed page names it


def _mode(path) -> str:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
        return connection.execute("PRAGMA journal_mode").fetchone()[0]


def _committed_databases() -> list:
    """Every SQLite store committed under results/ (git's list: a store a run is writing now, not yet
    committed, is not one of them); every *.db there when this is not a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "results"], cwd=REPO_ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return sorted((REPO_ROOT / "results").rglob("*.db"))
    return [REPO_ROOT / name for name in listed if name.endswith(".db")]


def test_every_committed_store_is_in_rollback_journal_mode():
    databases = _committed_databases()
    assert RESULTS / "store" / "mlflow.db" in databases and RESULTS / "store" / "optuna.db" in databases
    for path in databases:
        assert _mode(path) == "delete", f"{path.relative_to(REPO_ROOT)}: checkpoint it and set journal_mode=DELETE"


@pytest.mark.slow
def test_the_committed_pages_are_what_the_report_writes_from_the_committed_store(tmp_path, monkeypatch):
    from harness.report.reproduction import write_reproduction

    copy = tmp_path / "results" / "cpu-2core"
    shutil.copytree(RESULTS / "store", copy / "store")   # the report writes back into its store
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    write_reproduction(Store(STORE_URI), out)
    written = sorted(p.name for p in out.iterdir() if p.suffix in (".md", ".csv"))
    committed = sorted(p.name for p in RESULTS.iterdir() if p.suffix in (".md", ".csv") and p.name != "README.md")
    assert written == committed
    differ = [name for name in written if (out / name).read_bytes() != (RESULTS / name).read_bytes()]
    assert not differ, f"regenerate results/cpu-2core with `make reproduce-cpu-report`: {differ} differ"


def test_a_store_settled_for_commit_is_left_in_rollback_journal_mode(store, sweep_file):
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    run_sweep(sweep_spec.load(str(sweep_file("settle", {"sparsity": [0.0]}))), store, show_progress=False)
    path = store._sqlite_path()
    assert _mode(path) == "wal"
    assert store.settle_for_commit() == {"mlflow.db": "delete", "optuna.db": "delete"}
    assert _mode(path) == "delete" and _mode(path.with_name("optuna.db")) == "delete"
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]
