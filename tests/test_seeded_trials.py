"""Seeds in the objective (studies/seeded.py): `seeds_per_trial = N` runs each trial on N seeds, tells
Optuna the median and keeps the spread on the trial."""

from __future__ import annotations

import math
import textwrap

import optuna
import pytest

from harness.cells import CellResult
from harness.cli import main
from harness.specs import study_spec
from harness.specs.cell_spec import Cell
from harness.store import Outcome
from harness.store.tracking import KIND, Store
from harness.studies import seeded
from harness.studies.trial_end import objective
from conftest import mlflow_client

STUDY = """\
    name = "study_seeded"
    experiment = "recipe"
    metrics = ["time_to_accuracy_s", "test_accuracy"]
    directions = ["minimize", "maximize"]
    n_trials = 2
    seeds_per_trial = 3
    isolation = "none"

    [space]
    batch_size = { choices = [32, 64] }

    [sampler]
    name = "random"
    seed = 3

    [base]
    model = "tiny_cnn"
    dataset = "digits"
    train_limit = 256
    test_limit = 128
    optimizer = "adam"
    lr = 0.005
    epochs = 2
    target_accuracy = 0.3
    stop_at_target = true
    evals_per_epoch = 2
    threads = 1
    """


def _spec(tmp_path, text=STUDY):
    path = tmp_path / "study_seeded.toml"
    path.write_text(textwrap.dedent(text))
    return path, study_spec.load(str(path))


def test_the_trials_value_is_the_median_over_its_seeds_and_a_median_seed_that_missed_is_not_reached(tmp_path):
    _, spec = _spec(tmp_path)
    draws = {0: {"time_to_accuracy_s": 3.0, "target_reached": 1.0, "test_accuracy": 0.5},
             1: {"time_to_accuracy_s": 1.0, "target_reached": 1.0, "test_accuracy": 0.7},
             2: {"target_reached": 0.0, "test_accuracy": 0.2}}
    ran = []

    def run(cell, first):
        ran.append((cell.values["seed"], first))
        return CellResult(cell, Outcome.OK, dict(draws[cell.values["seed"]]), None, f"run{cell.values['seed']}")

    result, spread = seeded.run_seeds(spec, 3, Cell.build({"experiment": "recipe"}, "t"), run, objective)
    assert ran == [(0, True), (1, False), (2, False)]            # only the first seed feeds the pruner
    assert result.metrics["time_to_accuracy_s"] == 3.0 and result.metrics["test_accuracy"] == 0.5
    assert spread["time_to_accuracy_s"]["values"] == [3.0, 1.0, math.inf] and spread["runs"] == ["run0", "run1", "run2"]
    draws[0] = {"target_reached": 0.0, "test_accuracy": 0.1}     # two of three seeds missed: the trial did
    result, _ = seeded.run_seeds(spec, 3, Cell.build({"experiment": "recipe"}, "t"), run, objective)
    assert "time_to_accuracy_s" not in result.metrics and result.metrics["target_reached"] == 0.0
    assert objective("time_to_accuracy_s", "minimize", result.metrics) == math.inf
    assert spec.seeds_at("full") == 3


def test_a_failed_seed_ends_the_trial_as_it_ended(tmp_path):
    _, spec = _spec(tmp_path)
    outcomes = iter([Outcome.OK, Outcome.FAILED])
    result, spread = seeded.run_seeds(spec, 2, Cell.build({"experiment": "recipe"}, "t"),
                                      lambda cell, first: CellResult(cell, next(outcomes), {}, "boom"), objective)
    assert result.outcome == Outcome.FAILED and spread == {}


@pytest.mark.slow
def test_a_study_with_seeds_per_trial_runs_each_trial_on_every_seed_and_keeps_the_spread(tmp_path):
    path, _ = _spec(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]) == 0
    study = optuna.load_study(study_name="study_seeded-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    client = mlflow_client(Store(uri))
    exp = client.get_experiment_by_name("study_seeded")
    runs = client.search_runs([exp.experiment_id], f"tags.`{KIND}` = 'trial'")
    assert len(runs) == 6
    for trial in study.trials:
        spread = trial.user_attrs[seeded.SEEDS_ATTR]
        assert spread["seeds"] == [0, 1, 2]
        mine = [r for r in runs if r.info.run_id in spread["runs"]]
        assert sorted(int(r.data.params.get("seed", 0)) for r in mine) == [0, 1, 2]
        accuracies = sorted(r.data.metrics["test_accuracy"] for r in mine)
        assert trial.values[1] == pytest.approx(accuracies[1])       # the median seed's accuracy
        assert spread["test_accuracy"]["min"] == pytest.approx(accuracies[0])
    # the same study asked for another number of seeds would mix two kinds of value: refused
    path.write_text(path.read_text().replace("seeds_per_trial = 3", "seeds_per_trial = 2"))
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--n-trials", "3"]) == 2


def test_the_shipped_lr_batch_study_opts_in_at_full_only():
    spec = study_spec.load("study_lr_batch")
    assert spec.seeds_at("full") == 3 and spec.seeds_at("smoke") == spec.seeds_at("quick") == 1
