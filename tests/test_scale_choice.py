"""Make follows the user: without SCALE= a target passes `--scale last`, which is the scale that
sweep or study last ran at in this checkout, else the smallest, said in one line; a sweep's report
is written per scale, so a quick report leaves the smoke one in place."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import folders
from harness.cli import last_scale, main

from fault_helpers import tiny_sweep

ROOT = Path(__file__).parent.parent


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    """A state folder of this test's own."""
    monkeypatch.setattr(folders, "STATE_DIR", tmp_path / "state")
    return tmp_path / "state"


def _make_dry(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("target, scale", [
    (["study-lr-batch", "ARGS=--status"], "--scale last"),   # the README's line after a smoke study
    (["sweep-sparsity"], "--scale last"),
    (["report-sparsity"], "--scale last"),
    (["study-speed-recipe-verify"], "--scale last"),
    (["sweep-sparsity", "SCALE=quick"], "--scale quick"),
    (["report-sparsity", "SCALE=quick"], "--scale quick"),
])
def test_make_passes_the_scale_given_else_last(target, scale):
    assert scale in _make_dry(*target)


def test_a_sweep_never_run_here_takes_the_smallest_scale_and_says_why(state):
    said = []
    assert last_scale.choose("sweep", "sparsity", ["smoke", "quick", "full"], say=said.append) == "smoke"
    assert len(said) == 1 and "scale smoke, the smallest, since it has not run here yet" in said[0]


def test_the_last_scale_is_remembered_per_sweep_and_study(state):
    last_scale.record("sweep", "sparsity", "quick")
    last_scale.record("study", "lr_batch", "smoke")
    last_scale.record("sweep", "sparsity", "cpu")    # the later run wins
    said = []
    assert last_scale.choose("sweep", "sparsity", ["smoke", "quick", "cpu", "full"], say=said.append) == "cpu"
    assert last_scale.choose("study", "lr_batch", ["smoke", "quick", "full"], say=said.append) == "smoke"
    assert "sweep sparsity: scale cpu, the scale it last ran at here" in said[0]
    # a scale the file no longer has is not chosen
    assert last_scale.choose("sweep", "sparsity", ["smoke", "full"], say=said.append) == "smoke"
    assert (state / "last-scales.json").is_file()


def test_a_damaged_state_file_is_as_none(state):
    state.mkdir()
    (state / "last-scales.json").write_text("{half")
    assert last_scale.choose("sweep", "sparsity", ["smoke", "full"], say=lambda _: None) == "smoke"


def test_status_after_a_smoke_study_reads_the_smoke_study(state, study_file, tmp_path, capsys):
    """`make study-lr-batch ARGS=--status` after a smoke study asked for the full one ('has not been run')."""
    path = study_file("followed", space='lr = { type = "float", low = 0.001, high = 0.1, log = true }\n', n_trials=1)
    store = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main(["study", str(path), "--scale", "smoke", "--no-progress", *store]) == 0
    capsys.readouterr()
    assert main(["study", str(path), "--scale", "last", "--status", *store]) == 0
    out = capsys.readouterr().out
    assert "study followed: scale smoke, the scale it last ran at here" in out
    assert "followed-smoke" in out and "followed-full" not in out


def test_a_sweep_records_its_scale_and_reports_are_named_per_scale(state, tmp_path, capsys):
    path = tiny_sweep(tmp_path, "scaled", [0.0])
    path.write_text(path.read_text() + "[scales.quick]\nepochs = 1\n")
    uri, reports = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "reports"
    common = ["--tracking-uri", uri, "--no-progress"]
    assert main(["sweep", str(path), "--scale", "last", *common]) == 0        # nothing ran: smoke
    assert "scale smoke, the smallest" in capsys.readouterr().out
    assert main(["report", str(path), "--scale", "last", "--tracking-uri", uri, "--out", str(reports)]) == 0
    assert main(["sweep", str(path), "--scale", "quick", *common]) == 0
    capsys.readouterr()
    assert main(["report", str(path), "--scale", "last", "--tracking-uri", uri, "--out", str(reports)]) == 0
    assert "sweep scaled: scale quick, the scale it last ran at here" in capsys.readouterr().out
    written = sorted(p.name for p in reports.iterdir())
    assert {"scaled-smoke.md", "scaled-smoke.csv", "scaled-quick.md", "scaled-quick.csv"} <= set(written), written
    assert "quick" in (reports / "scaled-quick.md").read_text() and "smoke" in (reports / "scaled-smoke.md").read_text()


def test_a_refused_sweep_records_nothing(state, tmp_path):
    path = tiny_sweep(tmp_path, "refused", [0.0])
    assert main(["sweep", str(path), "--scale", "smoke", "--set", "lr=-1",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 2
    assert not (state / "last-scales.json").exists()


def test_no_file_may_name_a_scale_last(tmp_path, capsys):
    path = tiny_sweep(tmp_path, "lastly", [0.0])
    path.write_text(path.read_text() + "[scales.last]\nepochs = 1\n")
    assert main(["sweep", str(path), "--scale", "smoke", "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    assert "scale 'last' is the command line's word" in capsys.readouterr().err
