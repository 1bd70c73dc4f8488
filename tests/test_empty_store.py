"""The tests' fresh SQLite stores are copies of one store migrated per session (tests/conftest.py,
harness/store/tracking.py EMPTY_STORE_ENV): a copy must be the store MLflow's migrations build."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from harness.store import Outcome
from harness.store.tracking import EMPTY_STORE_ENV, Store


def _read(db: Path) -> tuple[list, list, tuple]:
    """The schema, the migration stamp and MLflow's Default experiment (its artifacts, its creation).
    Each statement is read as its set of lines: MLflow's migrations write a table's constraints in an
    order that differs from one build to the next in one process."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        schema = [(kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                  for kind, name, table, sql in
                  conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")]
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        default = conn.execute("SELECT artifact_location, creation_time FROM experiments "
                               "WHERE experiment_id = 0").fetchone()
    return schema, revision, default


def test_a_copied_store_is_the_store_the_migrations_build(empty_store_template, tmp_path, monkeypatch):
    copied_db, migrated_db = tmp_path / "copied" / "mlflow.db", tmp_path / "migrated" / "mlflow.db"
    copied = Store(f"sqlite:///{copied_db}")
    monkeypatch.delenv(EMPTY_STORE_ENV)
    migrated = Store(f"sqlite:///{migrated_db}")
    copied_schema, copied_revision, (copied_default, copied_made) = _read(copied_db)
    migrated_schema, migrated_revision, (migrated_default, migrated_made) = _read(migrated_db)
    assert copied_made == _read(empty_store_template)[2][1] != migrated_made   # a copy, and a real build
    assert copied_schema == migrated_schema and len(copied_schema) > 40
    assert copied_revision == migrated_revision and len(copied_revision) == 1
    # MLflow's Default experiment points at each store's own artifacts folder.
    assert copied_default == (tmp_path / "copied" / "artifacts").resolve().as_uri() + "/0"
    assert migrated_default == (tmp_path / "migrated" / "artifacts").resolve().as_uri() + "/0"
    for store in (copied, migrated):   # both take runs
        experiment = store.experiment_id("template_check")
        store.end_run(store.start_run(experiment, "a run", {}), Outcome.OK)
        assert [r.status for r in store.runs(experiment)] == ["FINISHED"]
