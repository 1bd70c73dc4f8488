"""A user's mistakes in what they ask for (sweep and study files, options, names, sizes),
reproduced for real: each gives one sentence on stderr, the right exit status, no traceback,
and the store holds afterwards what it should. How the faults are made: tests/fault_helpers.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.store.tracking import Store
from harness.store.uris import DEFAULT_TRACKING_URI

from fault_helpers import LR_SPACE, SWEEP, all_runs, cells_and_parents, in_process, tiny_sweep
from fault_helpers import uri  # noqa: F401 (fixtures)


# --- spec files: wrong types, not UTF-8, a malformed study space ---------------------------------
@pytest.mark.parametrize("text, words", [
    (SWEEP.replace('experiment = "pruning"', 'experiment = "pruning"\nrepeats = "abc"'), ["key 'repeats'", "integer", "'abc'"]),
    (SWEEP.replace("[base]\nmodel", "base = 5\n[other]\nmodel"), ["key 'base'", "dictionary", "5"]),
    (SWEEP + "[scales]\nsmoke = 3\n", ["key 'scales.smoke'", "dictionary", "3"]),
    (SWEEP.replace('name = "typed"', "name = 5"), ["key 'name'", "string", "5"]),
    (SWEEP.replace("[grid]", "colour = 3\n[grid]"), ["unknown config key 'colour'"]),
    ("surprise = 1\n" + SWEEP, ["unknown key", "surprise"]),
    (SWEEP.replace("sparsity = [", "sparsity = [[["), ["not valid TOML"]),
])
def test_a_sweep_file_with_a_wrong_type_or_key_is_one_sentence_naming_file_and_key(text, words, tmp_path, uri, capsys):
    path = tmp_path / "typed.toml"
    path.write_text(text)
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, str(path), *words)
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store was opened


def test_a_sweep_file_that_is_not_utf8_is_one_sentence(tmp_path, uri, capsys):
    path = tmp_path / "b.toml"
    path.write_bytes(b'name="b"\n#\xff\n')
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, str(path), "not UTF-8")
    unreadable = tmp_path / "gone.toml"
    in_process(["sweep", str(unreadable), "--tracking-uri", uri], 2, capsys, "gone")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("space, words", [
    (None, ["key 'space'", "dictionary", "3"]),
    ('lr = { type = "float", low = "a", high = 1.0 }\n', ["key 'space.lr.low'", "number", "'a'"]),
    ('lr = { type = "float", high = 1.0 }\n', ["key 'space.lr'", "low and high"]),
    ('lr = { type = "float", low = 0.1, high = 0.01 }\n', ["key 'space.lr'", "inverted"]),
    ('lr = { type = "float", low = 0.001, high = 1.0, colour = 1 }\n', ["unknown key", "colour"]),
    ('lr = { typ = "float" }\n', ["unknown key", "typ"]),
])
def test_a_malformed_study_space_is_one_sentence(space, words, study_file, tmp_path, uri, capsys):
    path = study_file("space", space=space or "")
    if space is None:  # `space = 3`, not a table
        path.write_text(path.read_text().replace("[space]\n", "").replace("n_trials = 4\n", "n_trials = 4\nspace = 3\n"))
    in_process(["study", str(path), "--tracking-uri", uri], 2, capsys, str(path), *words)
    assert not (tmp_path / "mlflow.db").exists()


# --- a sweep of zero cells ---------------------------------------------------------------------
@pytest.mark.parametrize("how, words", [
    ("set", ["sparsity=[]", "no cell"]),
    ("repeats", ["key 'repeats'", "greater than or equal to 1"]),
    ("scale", ["no cell to run"]),
])
def test_a_sweep_of_zero_cells_is_refused_and_creates_no_run(how, words, tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "empty", [0.0, 0.5])
    args = ["sweep", str(path), "--tracking-uri", uri]
    if how == "set":
        args += ["--set", "sparsity=[]"]
    elif how == "repeats":
        path.write_text("repeats = 0\n" + path.read_text())
    else:  # a scale that empties an axis
        path.write_text(path.read_text() + "[scales.smoke]\nsparsity = []\n")
        args += ["--scale", "smoke"]
    in_process(args, 2, capsys, *words)
    assert all_runs(uri) == []  # no empty parent run


# --- report --out: a file, an impossible path ---------------------------------------------------
def test_report_out_that_is_a_file_or_cannot_be_made_is_one_sentence(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "reported", [0.0])
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    in_process(["report", str(path), "--out", str(a_file), "--tracking-uri", uri], 2, capsys,
               str(a_file), "is a file")
    assert a_file.read_text() == "mine"
    in_process(["report", str(path), "--out", str(a_file / "sub"), "--tracking-uri", uri], 2, capsys,
               "report folder", "does not take new files")
    in_process(["report", "--out", "/proc/no/such/place", "--tracking-uri", uri], 2, capsys,
               "/proc/no/such/place")
    in_process(["study", "lr_batch", "--out", str(a_file), "--tracking-uri", uri], 2, capsys, "is a file")
    assert not (tmp_path / "mlflow.db").exists()


# --- non-finite numbers -------------------------------------------------------------------------
@pytest.mark.parametrize("sets, words", [
    (["lr=inf"], ["lr", "'inf'", "finite"]),
    (["lr=nan"], ["lr", "'nan'", "finite"]),
    (["lr=-Infinity"], ["lr", "finite"]),
    (["sparsity=[0.1,NaN]"], ["sparsity", "nan", "finite"]),
    (["weight_decay=1e999"], ["weight_decay", "finite"]),
])
def test_non_finite_numbers_from_set_are_refused(sets, words, tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "finite", [0.0])
    args = [a for s in sets for a in ("--set", s)]
    in_process(["sweep", str(path), *args, "--tracking-uri", uri], 2, capsys, *words)
    if not any(s.startswith("sparsity") for s in sets):
        in_process(["run", "pruning", *args, "--tracking-uri", uri], 2, capsys, *words)
    assert all_runs(uri) == []


def test_non_finite_numbers_in_spec_files_and_options_are_refused(tmp_path, study_file, uri, capsys):
    path = tiny_sweep(tmp_path, "finite", [0.0])
    path.write_text(path.read_text().replace("lr = 0.01", "lr = inf"))
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "key 'base.lr'", "finite")
    path.write_text(path.read_text().replace("lr = inf", "lr = 0.01").replace("[0.0]", "[0.0, nan]"))
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "key 'grid.sparsity[1]'", "finite")
    study = study_file("finite", space='lr = { type = "float", low = 1e-3, high = inf }\n')
    in_process(["study", str(study), "--tracking-uri", uri], 2, capsys, "key 'space.lr.high'", "finite")
    study = study_file("finite", space='lr = { type = "float", low = 1e-3, high = 0.1 }\n')
    in_process(["study", str(study), "--timeout", "nan", "--tracking-uri", uri], 2, capsys, "--timeout", "finite")
    from experiments import make_config
    from harness.errors import UserError

    with pytest.raises(UserError, match="finite"):  # whatever reads a config: a sweep cell, a trial
        make_config({"lr": float("inf")})


# --- an empty tracking URI ------------------------------------------------------------------------
def test_an_empty_tracking_uri_is_refused_and_the_projects_store_is_untouched(tmp_path, capsys, monkeypatch):
    default = Path(DEFAULT_TRACKING_URI.removeprefix("sqlite:///"))
    before = default.stat().st_mtime_ns if default.exists() else None
    path = tiny_sweep(tmp_path, "nowhere", [0.0])
    in_process(["sweep", str(path), "--tracking-uri", ""], 2, capsys, "--tracking-uri is empty")
    in_process(["sweep", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage", " "], 2,
               capsys, "--storage is empty")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    in_process(["sweep", str(path)], 2, capsys, "MLFLOW_TRACKING_URI is empty")
    assert (default.stat().st_mtime_ns if default.exists() else None) == before


# --- a model the experiment cannot train ------------------------------------------------------------
def test_a_model_the_experiment_cannot_train_is_refused_up_front(tmp_path, uri, study_file, capsys):
    words = ["experiment 'pruning' cannot train model 'lenet_d2l'", "tiny_cnn"]
    in_process(["run", "pruning", "--set", "model=lenet_d2l", "--set", "sparsity=0.5", "--tracking-uri", uri],
               2, capsys, *words)
    path = tiny_sweep(tmp_path, "models", [0.0, 0.5])
    in_process(["sweep", str(path), "--set", "model=lenet_d2l", "--tracking-uri", uri], 2, capsys, *words)
    in_process(["sweep", str(path), "--set", 'model=["tiny_cnn","lenet_d2l"]', "--tracking-uri", uri], 2, capsys,
               *words)
    study = study_file("models", space='model = { choices = ["tiny_cnn", "lenet_d2l"] }\n')
    in_process(["study", str(study), "--tracking-uri", uri], 2, capsys, *words)
    assert all_runs(uri) == []


# --- a name that climbs out of its folder --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sweep", "study"])
def test_a_name_that_climbs_out_of_its_folder_is_refused_before_anything_is_written(kind, tmp_path, study_file,
                                                                                    uri, capsys):
    escaped = "../../../ESCAPED"
    if kind == "sweep":
        path = tiny_sweep(tmp_path, "climb", [0.0])
    else:
        path = study_file("climb", space='lr = { type = "float", low = 1e-3, high = 1e-1 }\n')
    path.write_text(path.read_text().replace('name = "climb"', f'name = "{escaped}"'))
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    before = sorted(p.name for p in Path("/").iterdir())
    out = ["--out", str(work)] if kind == "study" else []
    in_process([kind, str(path), "--tracking-uri", uri, *out], 2, capsys, "key 'name'", "plain name", escaped)
    if kind == "sweep":
        in_process(["report", str(path), "--tracking-uri", uri, "--out", str(work)], 2, capsys, "plain name")
    assert sorted(p.name for p in Path("/").iterdir()) == before and not Path("/ESCAPED.md").exists()
    assert list(work.iterdir()) == [] and not list(tmp_path.glob("**/ESCAPED*"))
    assert all_runs(uri) == []


def test_a_scale_that_climbs_out_is_refused(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "scaled", [0.0])
    path.write_text(path.read_text() + '[scales."../../up"]\nepochs = 1\n')
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "plain name", "../../up")
    assert all_runs(uri) == []


def test_every_path_built_from_a_name_stays_inside_its_folder(tmp_path):
    from harness.errors import UserError
    from harness.store.paths import inside

    assert inside(tmp_path, "sweep-a") == tmp_path / "sweep-a"
    (tmp_path / "link").symlink_to("/")
    for climbing in ("../x", "/etc/passwd", "link/tmp"):
        with pytest.raises(UserError, match="outside"):
            inside(tmp_path, climbing)
    store = Store(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    with pytest.raises(UserError, match="outside"):  # an experiment named by code, not by a file
        store.experiment_id("../../ESCAPED")
    assert store.find_experiment("../../ESCAPED") is None and not (tmp_path / "ESCAPED").exists()


# --- large jobs ---------------------------------------------------------------------------------------
def test_a_sweep_past_max_cells_is_refused_and_a_large_one_says_how_large_first(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "huge", [round(i / 1000, 3) for i in range(600)])
    in_process(["sweep", str(path), "--tracking-uri", uri, "--set", "lr=[0.01,0.02]", "--max-cells", "1000"], 2,
               capsys, "1200 cells", "more than --max-cells 1000")
    in_process(["sweep", str(path), "--tracking-uri", uri, "--max-cells", "0"], 2, capsys, "--max-cells")
    assert all_runs(uri) == []
    # 10^9 epochs in one cell: the estimate comes before the cell starts (stopped here by a cap of 0 cells run).
    small = tiny_sweep(tmp_path, "long", [0.0])
    capsys.readouterr()
    assert main(["sweep", str(small), "--tracking-uri", uri, "--set", "epochs=1000000000", "--set",
                 "sparsity=[0.0,0.1]", "--max-cells", "1"]) == 2
    assert "more than --max-cells 1" in capsys.readouterr().err
    from harness.cli import commands

    args = SimpleNamespace(scale="full", sets=["epochs=1000000000"], max_cells=10)
    from harness.specs import sweep_spec

    commands._sweep_job(sweep_spec.load(str(small)), args)
    said = capsys.readouterr().err
    assert "is a large job: 1 cells, 1000000000 epochs in all" in said and all_runs(uri) == []


def test_a_study_past_max_trials_is_refused_before_anything_is_made(study_file, tmp_path, uri, capsys):
    path = study_file("vast", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    reports = tmp_path / "reports"
    args = ["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(reports)]
    in_process([*args, "--n-trials", "20000"], 2, capsys, "study vast at scale full has 20000 trials",
               "more than --max-trials 10000", "--n-trials")
    in_process([*args, "--max-trials", "0"], 2, capsys, "--max-trials must be at least 1 (got 0)")
    # The cap is the study's, not each worker's: two workers sharing 3 trials are 3 trials.
    in_process([*args, "--n-trials", "3", "--max-trials", "2", "--workers", "2"], 2, capsys,
               "has 3 trials, more than --max-trials 2")
    # Under Slurm it refuses before anything is checked or submitted (here no sbatch is even needed).
    in_process([*args, "--n-trials", "3", "--max-trials", "2", "--launcher", "slurm"], 2, capsys,
               "more than --max-trials 2")
    assert all_runs(uri) == [] and not (tmp_path / "optuna.db").exists() and not reports.exists()
    # --status runs no trial, so no cap stops it from reading the study (not run yet: its own sentence).
    in_process([*args, "--n-trials", "20000", "--status"], 2, capsys, "has not been run")


def test_a_large_study_says_how_large_before_its_first_trial(study_file, tmp_path, uri, capsys):
    path = study_file("long", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    # 10^9 epochs a trial: the estimate comes first; then the study opens and its timeout, already
    # past, lets no trial start.
    capsys.readouterr()
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "reports"),
                 "--set", "epochs=1000000000", "--timeout", "1e-9"]) == 0
    said = capsys.readouterr()
    assert ("harness: study long (full) is a large job: 2 trials, at most 2000000000 epochs in all; Ctrl-C stops "
            "it (finished trials are kept) and --max-trials caps it.") in said.err
    assert "ran 0 trial(s)" in said.out and cells_and_parents(uri)[0] == []
    # A searched epochs counts at the top of its range; a small study of short trials says nothing.
    from harness.cli import commands
    from harness.specs import study_spec

    searched = study_spec.load(str(study_file("searched", space='epochs = { type = "int", low = 1, high = 60000 }\n',
                                             n_trials=2)))
    commands._size_of_study(searched, SimpleNamespace(scale="full", n_trials=None, max_trials=10), {})
    assert "study searched (full) is a large job: 2 trials, at most 120000 epochs in all" in capsys.readouterr().err
    commands._size_of_study(searched, SimpleNamespace(scale="full", n_trials=1, max_trials=10), {})
    assert capsys.readouterr().err == ""
