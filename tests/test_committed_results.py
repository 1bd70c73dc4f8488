"""Each committed results folder (results/cpu-2core and its sub-folders): its pages are exactly what
`harness report` writes from the store committed beside them (byte for byte, the Markdown and CSV
files; so no figure on the page is edited by hand or left behind by a change of the report's code),
every recompute.py there (which reads the store without the harness) agrees with its folder, and a
store the harness commits is left in rollback-journal mode, so reading it writes nothing beside it."""

from __future__ import annotations

import csv
import shutil
import sqlite3
import subprocess
import sys

import pytest

from harness.folders import REPO_ROOT
from harness.store.tracking import Store

RESULTS = REPO_ROOT / "results" / "cpu-2core"
# Each committed results folder with its page and store, and the tables its page holds (None: every
# sweep; a sub-folder measured on a host of its own holds some of them).
FOLDERS = {
    "cpu-2core": None,
    "cpu-2core/data-parallel": ["dp-scratch", "resnet", "resnet-batch"],
    "cpu-2core/resnet-exercises": ["resnet-lr", "resnet-epochs"],
    "cpu-2core/airbench-fp32": ["airbench"],
    "cpu-2core/airbench-bf16": ["airbench"],
}


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


def test_every_results_folder_with_figures_has_its_store_beside_it():
    """Every committed figure recomputes from a store committed beside it: a folder under results/
    that holds a page or a CSV has a store/ of its own, or is a part (a quality ladder) of a folder
    that has one. Runs in no store are a record, kept under docs/history/, not a result. The first
    page, results/README.md, holds only what the folders' own files say (tests/test_results_index.py)."""
    results = REPO_ROOT / "results"
    folders = {p.parent for p in results.rglob("*") if p.suffix in (".md", ".csv")
               and "store" not in p.relative_to(results).parts and p != results / "README.md"}
    assert RESULTS in folders and RESULTS / "airbench-fp32" in folders
    bare = [f.relative_to(REPO_ROOT).as_posix() for f in sorted(folders)
            if not (f / "store").is_dir() and not (f.parent / "store").is_dir()]
    assert not bare, f"figures with no store beside them: {bare}"


@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS)
def test_the_committed_pages_are_what_the_report_writes_from_the_committed_store(folder, tmp_path, monkeypatch):
    from harness.report.reproduction import write_reproduction

    results = REPO_ROOT / "results" / folder
    copy = tmp_path / "results" / folder
    shutil.copytree(results / "store", copy / "store")   # the report writes back into its store
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    # the store's URI relative, as the committed page names it
    # the sub-folders that measured some of its tables again are read where they are committed
    write_reproduction(Store(f"sqlite:///results/{folder}/store/mlflow.db"), out, FOLDERS[folder], results)
    written = sorted(p.name for p in out.iterdir() if p.suffix in (".md", ".csv"))
    committed = sorted(p.name for p in results.iterdir() if p.suffix in (".md", ".csv") and p.name != "README.md")
    assert written == committed
    differ = [name for name in written if (out / name).read_bytes() != (results / name).read_bytes()]
    tables = f" TABLES={','.join(FOLDERS[folder])}" if FOLDERS[folder] else ""
    assert not differ, f"regenerate it with `make reproduce-cpu-report MACHINE={folder}{tables}`: {differ} differ"


READER = REPO_ROOT / "results" / "recompute"   # the reader every folder of tables' recompute.py runs


def test_every_folder_of_results_has_a_recompute_script():
    stores = {p.parent.parent for p in (REPO_ROOT / "results").rglob("mlflow.db") if p.parent.name == "store"}
    assert stores and not [s.relative_to(REPO_ROOT).as_posix() for s in stores if not (s / "recompute.py").exists()]


@pytest.mark.parametrize("script", sorted(p.relative_to(REPO_ROOT).as_posix()
                                           for p in (REPO_ROOT / "results").rglob("recompute.py")))
def test_every_recompute_script_agrees_with_its_committed_folder(script):
    """Each script asserts its figures (and, for a folder of tables, every interval's bounds and every
    verdict with its class) against the committed CSVs and page it recomputes; it imports nothing of
    the harness (it is a reader's check that the store, not our code, holds the figures)."""
    for path in (REPO_ROOT / script, *READER.glob("*.py")):
        text = path.read_text()
        assert "harness" not in " ".join(line for line in text.splitlines() if line.startswith(("import", "from")))
    done = subprocess.run([sys.executable, script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_folder_of_tables_recomputes_by_one_reader():
    """Every folder of tables (the 2-core page and each folder that measured some of its tables
    again on a host of its own) has the same recompute.py, which runs the reader in results/recompute/
    on the folder it is in: a fix to one copy that misses another fails here."""
    folders = [REPO_ROOT / "results" / folder for folder in FOLDERS]
    copies = {(folder / "recompute.py").read_bytes() for folder in folders}
    assert len(folders) == 5 and len(copies) == 1
    assert all((folder / "verdicts.csv").exists() for folder in folders)


def test_a_store_settled_for_commit_is_left_in_rollback_journal_mode(store, sweep_file):
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    run_sweep(sweep_spec.load(str(sweep_file("settle", {"sparsity": [0.0]}))), store, show_progress=False)
    path = store._sqlite_path()
    assert _mode(path) == "wal"
    assert store.settle_for_commit() == {"mlflow.db": "delete", "optuna.db": "delete"}
    assert _mode(path) == "delete" and _mode(path.with_name("optuna.db")) == "delete"
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]


@pytest.mark.parametrize("tamper", ["a verdict", "an interval", "a class"])
def test_a_recompute_script_fails_on_a_figure_or_verdict_the_store_does_not_give(tamper, tmp_path):
    """The reader is a check, not a printout: a folder whose CSV, verdicts.csv or page says what its
    store does not give makes its recompute.py exit non-zero."""
    folder = tmp_path / "results" / "cpu-2core" / "data-parallel"
    shutil.copytree(REPO_ROOT / "results" / "cpu-2core" / "data-parallel", folder)
    shutil.copytree(READER, tmp_path / "results" / READER.name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "sweeps", tmp_path / "sweeps")
    # the reader merges a sweep file with the one it extends by the harness's own stdlib-only rule
    (tmp_path / "harness" / "specs").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "harness" / "specs" / "extends.py", tmp_path / "harness" / "specs" / "extends.py")
    if tamper == "an interval":
        path = folder / "resnet.csv"
        rows = list(csv.DictReader(path.open()))
        rows[1]["speedup_hi"] = str(float(rows[1]["speedup_hi"]) - 0.01)   # 2 devices: [1.77, 2.00] -> 1.99
        with path.open("w", newline="") as out:
            writer = csv.DictWriter(out, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path = folder / "verdicts.csv"
        old, new = (",FAIL,1,FAIL (stand-in),", ",PASS,1,PASS (stand-in),") if tamper == "a verdict" else \
            (",computed fact,", ",measured claim,")
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new, 1))
    done = subprocess.run([sys.executable, str(folder / "recompute.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "AssertionError" in done.stderr, done.stdout[-1000:]
