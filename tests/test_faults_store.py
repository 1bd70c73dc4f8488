"""Faults of the tracking store and the shared database (unreachable, corrupt, read-only,
full, deleted, shared),
reproduced for real: each gives one sentence on stderr, the right exit status, no traceback,
and the store holds afterwards what it should. How the faults are made: tests/fault_helpers.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import mlflow_client

from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, REASON, Store

from fault_helpers import LR_SPACE, all_runs, assert_one_sentence, cells_and_parents, closed_port, digest, harness, immutable, in_process, tiny_sweep
from fault_helpers import password_server, uri  # noqa: F401 (fixtures)


# --- an unreachable or corrupt store: one sentence within 10 s, no retry spam ------------------
def _corrupt_stores(tmp_path) -> dict[str, str]:
    noise = tmp_path / "noise.db"
    noise.write_bytes(os.urandom(64 * 1024))
    real = tmp_path / "real" / "mlflow.db"
    Store(f"sqlite:///{real}").experiment_id("filler")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(real.read_bytes()[: real.stat().st_size // 3])
    return {"postgresql": f"postgresql://nobody@127.0.0.1:{closed_port()}/x",
            "random bytes": f"sqlite:///{noise}", "truncated": f"sqlite:///{truncated}"}


def test_an_unreachable_or_corrupt_store_is_refused_within_10_s(tmp_path):
    from harness.errors import UserError

    for kind, bad in _corrupt_stores(tmp_path).items():
        started = time.monotonic()
        with pytest.raises(UserError) as refused:
            Store(bad)
        assert time.monotonic() - started < 10, kind
        assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_an_unreachable_or_corrupt_store_is_one_line_from_a_real_process(tmp_path):
    for kind, bad in _corrupt_stores(tmp_path).items():
        before = digest(Path(bad.removeprefix("sqlite:///"))) if bad.startswith("sqlite") else None
        done = harness("run", "pruning", "--set", "dataset=synthetic", "--tracking-uri", bad, timeout=120)
        assert done.returncode == 2, (kind, done.stderr[-2000:])
        line = assert_one_sentence(done.stderr)
        assert ("cannot reach" in line) if kind == "postgresql" else ("not a usable SQLite database" in line), line
        if before:
            assert digest(Path(bad.removeprefix("sqlite:///"))) == before  # the damaged file is left as it was


# --- a read-only store ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_read_only_store_is_one_sentence_before_anything_runs(tmp_path, uri):
    path = tiny_sweep(tmp_path, "readonly", [0.0, 0.5])
    db = tmp_path / "mlflow.db"
    Store(uri).experiment_id("readonly")
    before = digest(db)
    with immutable(db):
        done = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert done.returncode == 2, done.stderr[-2000:]
    assert_one_sentence(done.stderr, str(db), "cannot be written")
    assert digest(db) == before and all_runs(uri) == []


# --- an unwritable artifacts folder: before the sweep, and in the middle of it ---------------------
@pytest.mark.slow
def test_an_unwritable_artifacts_folder_is_one_sentence_before_any_cell(tmp_path, uri):
    path = tiny_sweep(tmp_path, "noartifacts", [0.0, 0.5])
    Store(uri).experiment_id("noartifacts")
    with immutable(tmp_path / "artifacts" / "noartifacts"):
        done = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert done.returncode == 2, done.stderr[-2000:]
    assert_one_sentence(done.stderr, "artifacts folder", "does not take new files")
    assert all_runs(uri) == []  # no parent run, no cell


@contextlib.contextmanager
def _sweep_past_its_first_cell(path: Path, uri: str):
    """A sweep of `path` in its own process, handed over once its first cell has finished; killed on
    the way out if it is still running."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri,
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not any(r.info.status == "FINISHED" for r in cells_and_parents(uri)[0]):
            assert proc.poll() is None and time.time() < deadline, "no cell finished"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_artifacts_refused_mid_sweep_record_the_cell_failed_and_close_the_parent(tmp_path, uri):
    sparsities = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    path = tiny_sweep(tmp_path, "midway", sparsities, epochs=3)
    Store(uri).experiment_id("midway")
    folder = tmp_path / "artifacts" / "midway"
    with _sweep_past_its_first_cell(path, uri) as proc, immutable(folder):
        out, err = proc.communicate(timeout=300)   # from now on no new run can store its config.json
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, "refused to store an artifact", "finished cells are kept")
    cells, parents = cells_and_parents(uri)
    assert all(r.info.status != "RUNNING" for r in cells + parents)
    failed = [r for r in cells if r.info.status == "FAILED"]
    assert len(failed) == 1 and "refused to store an artifact" in failed[0].data.tags[REASON]
    assert all(r.data.tags[OUTCOME] == "ok" for r in cells if r not in failed)
    assert 1 <= len(cells) - 1 < len(sparsities)
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert parents[0].data.tags[REASON].startswith(f"stopped after {len(cells) - 1} of {len(sparsities)} cells")


# --- a full disk: in the middle of a sweep, and while a new store is created ------------------------
@pytest.mark.slow
def test_disk_full_mid_sweep_then_space_freed_loses_nothing(tmp_path, uri):
    sparsities = [round(0.05 * i, 2) for i in range(12)]
    path = tiny_sweep(tmp_path, "fulldisk", sparsities)
    Store(uri)
    # The store may grow by 64 KiB and its write-ahead log to the store's size: a few cells' worth.
    limit = (tmp_path / "mlflow.db").stat().st_size + 64 * 1024
    args = ["sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    full = harness(*args, file_size_limit=limit)
    assert full.returncode == 1, full.stderr[-2000:]
    line = assert_one_sentence(full.stderr, "refused", "finished cells are kept")
    cells, parents = cells_and_parents(uri)
    finished = {r.data.tags[CELL_ID]: r.info.run_id for r in cells if r.info.status == "FINISHED"}
    assert 1 <= len(finished) < len(sparsities), "the fault should come after some cells and before the end"
    assert len(finished) == len([r for r in cells if r.info.status == "FINISHED"])  # no cell twice
    left_open = [r for r in cells + parents if r.info.status == "RUNNING"]
    # What the store still took is closed; what it refused, the sentence says will be closed next time.
    assert not left_open or "could not close" in line, line

    assert main(args) == 0  # space freed: the same command (here: no second start-up of torch and MLflow)
    cells, parents = cells_and_parents(uri)
    assert sorted(r.data.tags[CELL_ID] for r in cells) == sorted({r.data.tags[CELL_ID] for r in cells})
    assert len(cells) == len(sparsities) and all(r.data.tags[OUTCOME] == "ok" for r in cells)
    assert all(r.info.status != "RUNNING" for r in cells + parents)
    kept = {r.data.tags[CELL_ID]: r.info.run_id for r in cells}
    assert all(kept[cell] == run for cell, run in finished.items())  # measured before the fault: kept


@pytest.mark.slow
def test_a_store_created_on_a_full_disk_leaves_nothing_and_works_once_space_is_freed(tmp_path, uri, monkeypatch):
    from harness.store.tracking import EMPTY_STORE_ENV

    monkeypatch.delenv(EMPTY_STORE_ENV, raising=False)  # MLflow's own migrations cut short, not a copy
    path = tiny_sweep(tmp_path, "newstore", [0.0])
    args = ["sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    full = harness(*args, file_size_limit=200_000)  # far less than MLflow's migrated schema
    assert full.returncode == 2, full.stderr[-2000:]
    assert_one_sentence(full.stderr, "cannot create the tracking store", "nothing was left behind")
    assert sorted(p.name for p in tmp_path.iterdir() if "mlflow.db" in p.name) == []
    assert main(args) == 0  # the same command, here
    cells, _ = cells_and_parents(uri)
    assert [r.data.tags[OUTCOME] for r in cells] == ["ok"]


# --- the store deleted mid-sweep ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_store_deleted_mid_sweep_stops_it_with_one_sentence_and_reports_nothing_ok(tmp_path, uri):
    sparsities = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    path = tiny_sweep(tmp_path, "vanish", sparsities, epochs=3)
    db = tmp_path / "mlflow.db"
    with _sweep_past_its_first_cell(path, uri) as proc:
        for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-shm"):  # what `rm mlflow.db*` does
            (tmp_path / name).unlink(missing_ok=True)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, str(db), "was deleted", "not kept")
    assert "cells:" not in out, out  # no summary counting cells that went nowhere as ok
    ran = [line for line in out.splitlines() if line.startswith("  sparsity=")]
    assert len(ran) < len(sparsities), out  # it stopped at the next cell
    # Read with a fresh connection (this process's MLflow engine still holds the unlinked file):
    # whatever sits at the path now holds no finished cell, and the same command runs every cell.
    assert _finished_cells(db) == 0
    again = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _finished_cells(db) == len(sparsities), again.stdout


def _finished_cells(db: Path) -> int:
    """FINISHED runs with a cell id in the SQLite store at `db`, read through a new connection."""
    import sqlite3

    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                                "WHERE runs.status = 'FINISHED' AND tags.key = ?", (CELL_ID,)).fetchone()[0]
        except sqlite3.OperationalError:  # no tables: a file no store was built in
            return 0


def test_a_store_deleted_during_a_studys_last_trial_is_named_and_nothing_is_reported(study_file, tmp_path, uri,
                                                                                     capsys, monkeypatch):
    """The real file deleted (as `rm mlflow.db*` does) just as the last trial ends: there is no
    next trial to notice it before, so the study itself checks before its report and summary."""
    from harness.studies import trial_steps

    path = study_file("vanishing", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    real, finished = trial_steps.run_cell, []

    def run_then_delete(*args, **kwargs):
        result = real(*args, **kwargs)
        finished.append(result)
        if len(finished) == 2:
            for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-shm"):
                (tmp_path / name).unlink(missing_ok=True)
        return result

    monkeypatch.setattr(trial_steps, "run_cell", run_then_delete)
    reports = tmp_path / "reports"
    capsys.readouterr()
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(reports)]) == 1
    said = capsys.readouterr()
    assert_one_sentence(said.err, str(tmp_path / "mlflow.db"), "was deleted", "not kept")
    assert len(finished) == 2 and "ran 2 trial(s)" not in said.out, said.out  # no summary of trials gone
    assert not list(reports.glob("*.md")) and _finished_cells(tmp_path / "mlflow.db") == 0


def test_a_store_replaced_by_another_file_is_named(tmp_path):
    from harness.errors import StoreGone

    db = tmp_path / "mlflow.db"
    store = Store(f"sqlite:///{db}")
    store.check_still_there()
    db.rename(tmp_path / "moved.db")
    with pytest.raises(StoreGone, match="was deleted"):
        store.check_still_there()
    Store(f"sqlite:///{db}")  # a new store at the same path: another file
    with pytest.raises(StoreGone, match="replaced"):
        store.check_still_there()


# --- two stores in one folder, two files with one study name --------------------------------------------


def test_two_stores_in_one_folder_keep_their_own_claims_and_studies(study_file, tmp_path):
    import optuna

    from harness.store import resolve_db_url

    first, second = (f"sqlite:///{tmp_path / name}" for name in ("mlflow.db", "other.db"))
    assert resolve_db_url(None, first) == f"sqlite:///{tmp_path / 'optuna.db'}"  # the default, as before
    assert resolve_db_url(None, second) == f"sqlite:///{tmp_path / 'other-optuna.db'}"
    path = study_file("twostores", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    out = ["--no-progress", "--out", str(tmp_path / "reports")]
    assert main(["study", str(path), "--tracking-uri", first, *out]) == 0
    assert main(["study", str(path), "--tracking-uri", second, *out]) == 0
    for uri, db in ((first, "optuna.db"), (second, "other-optuna.db")):
        trials = optuna.load_study(study_name="twostores-full", storage=f"sqlite:///{tmp_path / db}").get_trials()
        assert [t.state.name for t in trials] == ["COMPLETE"]  # the second ran its own, resumed none
        cells, _ = cells_and_parents(uri)
        assert [r.data.tags[OUTCOME] for r in cells] == ["ok"]  # each store holds the trial it ran


def test_one_study_database_given_to_two_stores_is_refused_by_the_second(study_file, tmp_path, capsys):
    """The same defect with the database named by hand (or two tracking servers over the project's
    default mlruns/optuna.db): the second store would resume trials whose runs the first holds."""
    path = study_file("onedb", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    first, second = (f"sqlite:///{tmp_path / name / 'mlflow.db'}" for name in ("a", "b"))
    args = ["study", str(path), "--storage", f"sqlite:///{tmp_path / 'studies.db'}", "--no-progress",
            "--out", str(tmp_path / "reports")]
    assert main([*args, "--tracking-uri", first]) == 0
    in_process([*args, "--tracking-uri", second], 2, capsys, "'onedb-full'", "another tracking store", second,
               "--storage")
    assert all_runs(second) == []  # no parent run, no trial in the second store
    assert main([*args, "--tracking-uri", first, "--n-trials", "2"]) == 0  # its own store resumes it
    assert [r.data.tags[OUTCOME] for r in cells_and_parents(first)[0]] == ["ok", "ok"]


def test_a_study_name_claimed_by_a_file_with_another_space_is_refused(study_file, tmp_path, uri, capsys):
    import optuna

    path = study_file("samename", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)]) == 0
    path.write_text(path.read_text().replace("high = 1e-1", "high = 0.5"))
    in_process(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)], 2, capsys,
               "'samename-full'", "another [space]", str(path))
    trials = optuna.load_study(study_name="samename-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert len(trials) == 1  # nothing was added to the other file's study
    assert len(cells_and_parents(uri)[0]) == 1


# --- `harness report` on a store that is not there; paths SQLite cannot carry ------------------------------
def test_report_on_a_missing_sqlite_store_creates_nothing_and_keeps_the_old_report(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "REPRODUCTION.md").write_text("kept")
    typo = tmp_path / "mlfow.db"
    in_process(["report", "--tracking-uri", f"sqlite:///{typo}", "--out", str(reports)], 2, capsys,
               str(typo), "creates none")
    path = tiny_sweep(tmp_path, "absent", [0.0])
    in_process(["report", str(path), "--tracking-uri", f"sqlite:///{typo}", "--out", str(reports)], 2, capsys,
               "'absent' has not been run", str(typo))
    assert not typo.exists() and not (tmp_path / "artifacts").exists()
    assert (reports / "REPRODUCTION.md").read_text() == "kept" and sorted(os.listdir(reports)) == ["REPRODUCTION.md"]
    empty = f"sqlite:///{tmp_path / 'empty' / 'mlflow.db'}"
    Store(empty)  # a store that exists, with no sweep in it
    in_process(["report", "--tracking-uri", empty, "--out", str(reports)], 2, capsys, "no sweep has a finished cell",
               "left as it was")
    assert (reports / "REPRODUCTION.md").read_text() == "kept"


@pytest.mark.parametrize("folder", ["a?mode=ro", "a%3Fb", "100%"])
def test_a_sqlite_path_sqlite_cannot_carry_is_refused_and_leaves_nothing(folder, tmp_path, capsys):
    path = tiny_sweep(tmp_path, "marks", [0.0])
    before = sorted(p.name for p in tmp_path.iterdir())
    uri = f"sqlite:///{tmp_path / folder / 'mlflow.db'}"
    char = "?" if "?" in folder else "%"
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, f"holds '{char}'")
    good = f"sqlite:///{tmp_path / 'fine' / 'mlflow.db'}"
    in_process(["sweep", str(path), "--tracking-uri", good, "--storage", f"sqlite:///{tmp_path / folder / 'x.db'}"], 2,
               capsys, "the shared database", f"holds '{char}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder, no lock, no store


# --- a tracking server killed mid-sweep ----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_killed_tracking_server_is_named_within_30_s(password_server, tmp_path):
    import signal

    path = tiny_sweep(tmp_path, "serverdies", [0.0, 0.2, 0.4, 0.6], epochs=400, train_limit=64, test_limit=32)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", password_server.uri,
                             "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = mlflow_client(SimpleNamespace(uri=password_server.uri))
    try:
        deadline = time.time() + 180
        while True:  # a cell is inside its epochs
            assert proc.poll() is None and time.time() < deadline, "no cell started"
            found = client.get_experiment_by_name("serverdies")
            if found and [r for r in client.search_runs([found.experiment_id]) if r.data.metrics]:
                break
            time.sleep(0.2)
        os.killpg(password_server.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, "tracking store", "http://harness:***@")
    assert took < 30, f"{took:.0f} s of silence before the sentence"
