"""A mistake is answered before anything heavy is loaded: each typical mistake of `make bench-cli`
(benchmarks/cli.py), run as `python -X importtime -m harness ...` in a fresh process, exits 2 with
one whole sentence, having imported neither torch nor MLflow nor Optuna and written nothing (no
store, no data folder, no record of a run); `harness list` lists without them too. Not timed: what
was imported is what decides the time, on any machine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from harness.folders import REPO_ROOT

_spec = importlib.util.spec_from_file_location("cli_bench", REPO_ROOT / "benchmarks" / "cli.py")
cli_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_bench)

HEAVY = ("torch", "mlflow", "optuna")


def _harness(tmp_path, *argv: str) -> tuple[int, list[str], set[str]]:
    """(exit status, stderr lines other than -X importtime's, top-level packages imported), run in
    `tmp_path` with the bench's study files there and its offline setting."""
    env_store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cli_bench.write_study_files(tmp_path)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *argv], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**_environment(), "MLFLOW_TRACKING_URI": env_store, **cli_bench.OFFLINE,
                               "HARNESS_STATE_DIR": str(tmp_path / "state")})
    timings = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    said = [line for line in done.stderr.splitlines() if line and not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in timings[1:]}
    return done.returncode, said, imported


def _environment() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.parametrize("label, argv", cli_bench.MISTAKES, ids=[label for label, _ in cli_bench.MISTAKES])
def test_each_mistake_is_one_sentence_and_exit_2_before_torch_mlflow_or_optuna_is_imported(tmp_path, label, argv):
    code, said, imported = _harness(tmp_path, *argv)
    assert code == 2, said
    assert len(said) == 1 and said[0].startswith("harness: error: "), said
    assert said[0].endswith("."), said[0]   # whole: a library's sentence cut short ends elsewhere
    assert sorted(set(HEAVY) & imported) == [], f"{label}: imported {sorted(set(HEAVY) & imported)} first"
    # no store opened, no data folder made, no run recorded
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(cli_bench.study_files())


def test_harness_list_lists_without_torch_mlflow_or_optuna(tmp_path):
    code, said, imported = _harness(tmp_path, "list")
    assert code == 0 and said == []
    assert sorted(set(HEAVY) & imported) == []


def test_the_benchmark_lists_a_dozen_mistakes_of_different_kinds():
    commands = {argv[0] for _, argv in cli_bench.MISTAKES}
    assert len(cli_bench.MISTAKES) >= 12 and {"sweep", "study", "run"} <= commands


@pytest.mark.parametrize("label, words", [
    ("mistyped command", ["unknown command 'swep'", "did you mean 'sweep'?"]),
    ("unsupported tracking-URI scheme", ["foo://bar", "scheme 'foo'", "sqlite:///path/mlflow.db"]),
    ("--storage mysql:// without its driver", ["mysql://user:***@localhost/db", "'MySQLdb'", "not installed"]),
    ("--calibrate-target at an uncalibrated scale", ["study file sweeps/study_speed_recipe.toml", "no target at scale smoke"]),
    ("quick scale without DATASET (offline)", ["dataset 'cifar10' is not in data_dir data", "offline",
                                               "cifar-10-batches-py"]),
    ("n_trials = 0 in a study file", ["study file study_zero_trials.toml: key 'n_trials': must be 1 or more (got 0)."]),
    ("seeds_per_trial = 0 in a study file", ["study_zero_seeds.toml: key 'seeds_per_trial': must be 1 or more"]),
    ("--set seed beyond numpy's", ["'seed'", "4294967295", "99999999999999999999"]),
    ("unknown group of harness list", ["no group 'sweep'", "did you mean 'sweeps'?"]),
])
def test_the_newcomers_mistakes_each_say_what_to_change(tmp_path, label, words):
    """The probes of a newcomer's first hour, each answered in its own words (which mistake, where)."""
    argv = dict(cli_bench.MISTAKES)[label]
    code, said, _ = _harness(tmp_path, *argv)
    assert code == 2 and len(said) == 1, said
    assert [w for w in words if w not in said[0]] == [], said[0]
    assert len(said[0]) < 400, said[0]   # no parsed file, no page of a library's context pasted in
    assert str(REPO_ROOT) not in said[0]   # a project file is named from the project's root


def test_harness_help_shows_its_description_whole(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=_environment())
    shown = " ".join(done.stdout.split())
    assert done.returncode == 0 and "reproduce every table at a scale," in shown
    assert "show the measured peak." in shown and "machine" in shown
