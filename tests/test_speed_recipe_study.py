"""A study with a baseline trial: the baseline runs first and sets the target every later trial is
timed to; compound choices; a target not reached; the report beside the baseline with speed-up and MFU."""

from __future__ import annotations

import math
import textwrap

import optuna
import pandas as pd
import pytest

from harness.cli import main
from harness.studies import baseline, host_space
from harness.studies.trial_end import objective
from harness.studies.trial_tags import WARM_START_ATTR
from harness.store.tracking import Store
from conftest import assert_one_sentence_exit_2, mlflow_client

TINY_RECIPE_STUDY = """\
    name = "study_tinyrecipe"
    experiment = "recipe"
    metrics = ["time_to_accuracy_s", "test_accuracy"]
    directions = ["minimize", "maximize"]
    n_trials = 3

    [space]
    channels_last = { choices = [false, true] }
    execution = { choices = [{ execution = "eager" }, { execution = "compile", compile_backend = "eager" }] }
    batch_size = { choices = [32, 64] }

    [baseline]
    name = "plain loop"
    target_from_epoch = 1
    [baseline.params]
    channels_last = false
    execution = { execution = "eager" }
    batch_size = 32

    [sampler]
    name = "random"
    seed = 1

    [base]
    model = "tiny_cnn"
    dataset = "synthetic"
    train_limit = 256
    test_limit = 128
    optimizer = "adam"
    lr = 0.01
    lr_base_batch = 32
    epochs = 3
    stop_at_target = true
    evals_per_epoch = 2
    threads = 1

    [report]
    metrics = ["mfu", "samples_per_s"]
    """


def _write(folder, text=TINY_RECIPE_STUDY, replace=()):
    text = textwrap.dedent(text)
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = folder / "study_tinyrecipe.toml"
    path.write_text(text)
    return path


def test_the_baseline_runs_first_and_every_later_trial_is_timed_to_its_accuracy(tmp_path):
    path = _write(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]) == 0
    study = optuna.load_study(study_name="study_tinyrecipe-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    first, *others = study.trials
    assert len(others) == 2 and first.user_attrs[baseline.BASELINE_ATTR] is True
    assert first.params == {"channels_last": False, "execution": "execution=eager", "batch_size": 32}
    assert not any(t.user_attrs.get(baseline.BASELINE_ATTR) for t in others)

    client = mlflow_client(Store(uri))
    base_run = client.get_run(first.user_attrs["mlflow_run_id"]).data
    after_epoch_1 = client.get_metric_history(first.user_attrs["mlflow_run_id"], "epoch_test_accuracy")[0].value
    target = study.user_attrs[baseline.TARGET_ATTR]
    assert target == base_run.metrics["target_accuracy"] == after_epoch_1
    assert base_run.params["target_from_epoch"] == "1" and base_run.metrics["epochs_trained"] == 1.0
    assert first.values[0] == base_run.metrics["time_to_accuracy_s"]
    for trial in others:
        params = client.get_run(trial.user_attrs["mlflow_run_id"]).data.params
        assert params["target_from_epoch"] == "0" and float(params["target_accuracy"]) == target
        compiled = trial.params["execution"] != "execution=eager"
        assert params["execution"] == ("compile" if compiled else "eager")
        assert params["compile_backend"] == ("eager" if compiled else "inductor")   # set by the compound choice

    report = (tmp_path / "out" / "study_tinyrecipe-full.md").read_text()
    assert f"baseline (plain loop, trial 0): time_to_accuracy_s {first.values[0]:.4g}" in report
    assert f"target: test accuracy {target:.4g}, the baseline's after 1 epoch(s)" in report
    table = pd.read_csv(tmp_path / "out" / "study_tinyrecipe-full.csv")
    assert list(table.columns) == ["trial", "channels_last", "execution", "batch_size", "time_to_accuracy_s",
                                   "speedup", "test_accuracy", "time_to_accuracy_resolution_s", "mfu", "samples_per_s",
                                   "contended", "mlflow_run_id"]
    assert table["trial"].iloc[0] == 0 and table["speedup"].iloc[0] == 1.0
    for row in table.itertuples():
        assert row.speedup == pytest.approx(first.values[0] / row.time_to_accuracy_s)
        assert 0 < row.mfu < 1
        assert 0 < row.time_to_accuracy_resolution_s <= row.time_to_accuracy_s   # printed with every time
        assert row.mfu == pytest.approx(client.get_run(row.mlflow_run_id).data.metrics["mfu"])


def test_a_target_not_reached_is_the_worst_value_not_a_failure():
    reached = {"time_to_accuracy_s": 3.0, "target_reached": 1.0}
    missed = {"target_reached": 0.0, "test_accuracy": 0.2}
    assert objective("time_to_accuracy_s", "minimize", reached) == 3.0
    assert objective("time_to_accuracy_s", "minimize", missed) == math.inf
    assert objective("epochs_to_accuracy", "minimize", missed) == math.inf
    assert objective("train_time_s", "minimize", missed) is None      # an ordinary metric missing: a failure
    assert objective("time_to_accuracy_s", "minimize", {"test_accuracy": 0.2}) is None   # no target at all


def test_a_baseline_that_never_reached_the_target_forms_no_speedup(tmp_path):
    """A calibrated target the book's loop cannot reach in its budget: a trial that reached it is not
    printed as "not reached" (infinity over its time) and the report says why there is no speed-up."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from harness.specs import study_spec
    from harness.studies import study_report

    spec = study_spec.load(str(_write(tmp_path)))
    space = {"channels_last": CategoricalDistribution([False, True]),
             "execution": CategoricalDistribution(["execution=eager", "execution=compile compile_backend=eager"]),
             "batch_size": CategoricalDistribution([32, 64])}
    params = {"channels_last": False, "execution": "execution=eager", "batch_size": 32}
    study = optuna.create_study(directions=["minimize", "maximize"])
    for seconds, accuracy, attrs in [(math.inf, 0.44, {baseline.BASELINE_ATTR: True}), (212.0, 0.59, {}),
                                     (90.0, 0.58, {})]:
        study.add_trial(create_trial(params=params, distributions=space, values=[seconds, accuracy], user_attrs=attrs))
    report = study_report.build(spec, study)
    assert report.front["speedup"].isna().all()
    assert "not reached" not in report.text.split("\n| 0 |")[1].split("\n")[1]   # trial 2's row: 90 s, no speed-up
    assert "fastest on the front: trial 2, 90 s to the target, which the baseline did not reach" in report.text
    assert "infx" not in report.text


@pytest.mark.parametrize("replace, words", [
    ((("batch_size = 32\n\n[sampler]", "\n[sampler]"),), ["[baseline] params", "'batch_size' is missing"]),
    ((("channels_last = false\nexecution = { execution", "channels_last = 3\nexecution = { execution"),),
     ["[baseline] channels_last = 3 is not a value [space] allows"]),
    ((('{ execution = "eager" }, { execution = "compile"', '"eager", { execution = "compile"'),),
     ["mixes tables and single values"]),
])
def test_a_baseline_or_space_mistake_is_one_sentence(tmp_path, capsys, replace, words):
    path = _write(tmp_path, replace=replace)
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], words, capsys)


def test_a_baseline_study_refuses_workers_and_a_target_of_its_own(tmp_path, capsys):
    path = _write(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", uri, "--workers", "2"],
                               ["against a baseline trial", "one worker"], capsys)
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", uri, "--set", "target_accuracy=0.5"],
                               ["the target of this study is the accuracy its baseline trial reaches"], capsys)


@pytest.mark.slow
def test_the_shipped_speed_recipe_study_runs_at_smoke_scale(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", "speed_recipe", "--scale", "smoke", "--tracking-uri", uri, "--no-progress",
                 "--out", str(tmp_path / "out")]) == 0
    study = optuna.load_study(study_name="study_speed_recipe-smoke", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 4 and study.trials[0].user_attrs[baseline.BASELINE_ATTR]
    # then the file's warm starts, in order (the tuned loop is the baseline itself at smoke); those past
    # the 4 trials wait for a resumed study
    emulates_bf16 = "bf16" in study.user_attrs.get(host_space.HOST_ATTR, {}).get("left_out", [])
    assert [t.user_attrs.get(WARM_START_ATTR) for t in finished[1:]] == [
        "tuned + channels_last", "tuned + compile", "tuned + batch 128" if emulates_bf16 else "tuned + bf16"]
    report = (tmp_path / "out" / "study_speed_recipe-smoke.md").read_text()
    assert "baseline (the book's loop, trial 0)" in report and "| speedup |" in report and "| mfu |" in report
    assert (tmp_path / "out" / "study_speed_recipe-smoke.png").stat().st_size > 0
