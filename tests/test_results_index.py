"""results/README.md, the first page of results/: it is what the folders give (written again by `make
results-index`), it names every folder of results and none that is gone, and a folder added under
results/ (a new study, new calibrated targets) is on it at the next writing without a line of code."""

from __future__ import annotations

import re
import shutil
import sqlite3

from harness.folders import REPO_ROOT
from harness.report import results_index

RESULTS = REPO_ROOT / "results"


def _stores() -> set[str]:
    return {p.parent.parent.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("mlflow.db")
            if p.parent.name == "store" and "store" not in p.parent.parent.relative_to(RESULTS).parts}


def test_the_committed_index_is_what_the_folders_give():
    committed = (RESULTS / "README.md").read_text()
    assert committed == results_index.page(results_index.folders()), \
        "results/README.md is out of date: write it again with `make results-index`"


def test_the_index_names_every_folder_of_results_and_none_that_is_gone():
    text = (RESULTS / "README.md").read_text()
    linked = {m.group(1).rstrip("/") for m in re.finditer(r"\]\(([\w./-]+?)/(?:README|REPRODUCTION)\.md\)", text)}
    folders = _stores()
    assert folders <= linked, f"folders of results missing from results/README.md: {sorted(folders - linked)}"
    for name in linked:
        assert (RESULTS / name).is_dir(), f"results/README.md links {name}/, which is gone"


def test_the_index_answers_where_a_table_was_measured_last_on_which_host_and_how_to_measure_it_again():
    """A reader after T6.1's newest verdict finds it on the first page, with its host and the command."""
    text = (RESULTS / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| T6.1 `sparsity` |"))
    assert "](cpu-2core/REPRODUCTION.md)" in row and "fingerprint dae85a0011" in row
    assert "`make reproduce-cpu DATA_DIR=" in row and "TABLES=sparsity`" in row
    assert re.search(r"\*\*(PASS|FAIL|INCONCLUSIVE|N/A|DIFFERS: machine)[^*]*\*\*", row)


def _fake_folder(root, name: str, kind: str) -> None:
    """A folder of results with a one-run store, as a study or a calibration would leave it."""
    store = root / name / "store"
    store.mkdir(parents=True)
    with sqlite3.connect(store / "mlflow.db") as db:
        db.execute("create table runs (run_uuid text, start_time integer, lifecycle_stage text)")
        db.execute("create table tags (run_uuid text, key text, value text)")
        db.execute("insert into runs values ('r1', 1796400000000, 'active')")
        for key, value in {"fingerprint": "0123456789", "cpu.model": "Some CPU", "cpu.cores": "4",
                           "harness.kind": kind, "harness.procedure": "4", "harness.scale": "cpu",
                           "harness.study": "study_speed_recipe-cpu-0000", "git.dirty": "false"}.items():
            db.execute("insert into tags values ('r1', ?, ?)", (key, value))
    (root / name / "README.md").write_text("# A new folder of results\n")


def test_a_folder_added_under_results_is_on_the_index_at_the_next_writing(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(RESULTS / "targets", root / "targets")
    _fake_folder(root, "cpu-4core/study_new", "study")
    (root / "targets" / "study_new-cpu.json").write_text('{"study": "study_new", "scale": "cpu", '
                                                          '"target_accuracy": 0.5, "lr_factor": 4.0}')
    written = results_index.page(results_index.folders(root))
    assert "[cpu-4core/study_new/](cpu-4core/study_new/README.md): A new folder of results" in written
    assert "[study_new-cpu.json](targets/study_new-cpu.json)" in written and "target accuracy **0.5**" in written
    assert "**2 folders of results, measured on 2 hosts**" in written
    shutil.rmtree(root / "cpu-4core")
    assert "study_new/" not in results_index.page(results_index.folders(root))


def test_a_budgeted_study_is_measured_again_under_its_budget_in_one_command(tmp_path):
    """The budget is read from the study's Optuna file as --budget writes it back; a study without one
    (or a folder without an Optuna file) keeps the two commands, study then race."""
    import json
    import sqlite3

    from harness.report.results_index import study_budget

    assert study_budget(tmp_path / "optuna.db") == ""
    for seconds, text in [(7200, "2h"), (5400, "1h30m"), (2700, "45m"), (None, "")]:
        path = tmp_path / f"optuna-{seconds}.db"
        with sqlite3.connect(path) as db:
            db.execute("create table study_user_attributes (study_id int, key text, value_json text)")
            if seconds is not None:
                db.execute("insert into study_user_attributes values (1, 'harness.budget_s', ?)", (json.dumps(seconds),))
        assert study_budget(path) == text
