"""A target that ranks (studies/calibrated_target.py): measured from the study's tuned baseline by
`harness study NAME --calibrate-target`, written beside the study's results, and the one target (with its
fine clock) of every trial; a calibrated scale without its file is refused before anything runs."""

from __future__ import annotations

import json
import math
import textwrap

import optuna
import pandas as pd
import pytest

from harness import folders
from harness.cli import main
from harness.errors import UserError
from harness.store.tracking import KIND, Store
from harness.specs import study_spec
from harness.studies import calibrated_target
from conftest import assert_one_sentence_exit_2, mlflow_client

STUDY = """\
    name = "study_calibrated"
    experiment = "recipe"
    metrics = ["time_to_accuracy_s", "test_accuracy"]
    directions = ["minimize", "maximize"]
    n_trials = 3

    [space]
    batch_size = { choices = [32, 64] }
    lr_factor = { choices = [1.0, 2.0] }
    layout = { choices = [{ world_size = 1, threads = 1 }] }   # a compound choice: a table in [baseline]

    [baseline]
    name = "plain loop"
    [baseline.params]
    batch_size = 32
    lr_factor = 1.0
    layout = { world_size = 1, threads = 1 }

    [target]
    epochs = { smoke = 2, quick = 2, full = 2 }   # every scale: none falls back to a baseline's own target
    margin = 0.02
    seeds = [0, 1]
    probe_size = 64
    lr_doublings = 1    # x4 is tried only if x2, the grid's top, beats x1

    [sampler]
    name = "random"
    seed = 1

    [verify]
    seeds = [0, 1, 2]
    lr_factors = [2]

    [base]
    model = "tiny_cnn"
    dataset = "digits"
    train_limit = 256
    test_limit = 256
    optimizer = "adam"
    lr = 0.003
    lr_base_batch = 32
    epochs = 3
    stop_at_target = true
    evals_per_epoch = 2
    threads = 1
    """


@pytest.fixture
def calibrated(tmp_path, monkeypatch):
    monkeypatch.setattr(folders, "TARGETS_DIR", tmp_path / "targets")
    path = tmp_path / "study_calibrated.toml"
    path.write_text(textwrap.dedent(STUDY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return path, uri, ["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]


def test_a_calibrated_scale_without_its_file_is_refused_and_a_target_cannot_be_set_by_hand(calibrated, capsys):
    path, _, args = calibrated
    assert_one_sentence_exit_2(args, ["calibrated target", "does not exist", "--calibrate-target"], capsys)
    assert_one_sentence_exit_2([*args, "--set", "target_accuracy=0.5"], ["is calibrated", "--calibrate-target"], capsys)
    # the shipped speed-recipe study calibrates cpu and full; smoke keeps its baseline's own target
    spec = study_spec.load("study_speed_recipe")
    assert calibrated_target.applied(spec, "smoke", {"epochs": 3}) == {"epochs": 3}
    assert spec.fixed("smoke")["target_from_epoch"] == 2 and spec.fixed("cpu")["target_from_epoch"] == 0
    # airbench's CPU study opts in at cpu only: refused there without its file, smoke untouched
    airbench = study_spec.load("study_airbench_cpu")
    assert calibrated_target.calibrated_at(airbench, "cpu") and not calibrated_target.calibrated_at(airbench, "smoke")
    with pytest.raises(UserError, match="does not exist"):
        calibrated_target.applied(airbench, "cpu", airbench.fixed("cpu"))
    bad = path.read_text().replace("epochs = { smoke = 2,", "epochs = { huge = 2, smoke = 2,")
    path.write_text(bad)
    assert_one_sentence_exit_2(args, ["[target] names scale 'huge'"], capsys)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_target_is_the_tuned_baselines_median_best_less_the_margin_and_every_trial_is_timed_to_it(calibrated, capsys):
    path, uri, args = calibrated
    assert main([*args, "--calibrate-target"]) == 0
    spec = study_spec.load(str(path))
    found = json.loads(calibrated_target.path(spec, "full").read_text())
    runs = found["runs"]
    lr = [r for r in runs if r["step"] == "lr"]
    by_factor = {r["lr_factor"]: r["best_test_accuracy"] for r in lr}
    grew = by_factor[2.0] > by_factor[1.0]   # the top of the grid [1, 2] was the best: it doubled once
    assert sorted(by_factor) == ([1.0, 2.0, 4.0] if grew else [1.0, 2.0]) and all(r["seed"] == 0 for r in lr)
    tuned = max(lr, key=lambda r: (r["best_test_accuracy"], -r["lr_factor"]))
    assert found["lr_at_grid_edge"] == (grew and tuned["lr_factor"] == 4.0)
    assert found["lr_factor"] == tuned["lr_factor"]
    bests = sorted([tuned["best_test_accuracy"], *(r["best_test_accuracy"] for r in runs if r["step"] == "seed")])
    assert found["target_accuracy"] == pytest.approx(sum(bests) / 2 - 0.02, abs=1e-4)   # the median of 2 seeds
    # the fine clock: a check every 2% of the tuned baseline's training samples to the target (a step at least)
    assert found["check_every_samples"] == max(32, int(0.02 * found["samples_to_target"]))
    assert found["probe_size"] == 64 and found["within_epochs"] == 2

    from harness.machine.fingerprint import fingerprint
    assert found["fingerprint"] == fingerprint()["fingerprint"] and "cores" in found["machine"]
    assert " UTC to " in found["measured"]     # when its runs started, first to last

    capsys.readouterr()
    assert main([*args, "--calibrate-target"]) == 0          # resumes: every run reused
    assert capsys.readouterr().out.count("reused run") == len(runs)
    # a run another machine measured is never reused: it is measured again here (the last run, so that the
    # first start, which the file's "measured" begins with, is one this rewrite keeps)
    client = mlflow_client(Store(uri))
    client.set_tag(runs[-1]["mlflow_run_id"], "fingerprint", "0ther0ther")
    assert main([*args, "--calibrate-target"]) == 0
    out = capsys.readouterr().out
    assert out.count("reused run") == len(runs) - 1 and runs[-1]["mlflow_run_id"] not in out
    again = json.loads(calibrated_target.path(spec, "full").read_text())
    assert again["measured"].split(" to ")[0] == found["measured"].split(" to ")[0]   # not the rewrite's time

    assert main(args) == 0
    client = mlflow_client(Store(uri))
    exp = client.get_experiment_by_name("study_calibrated")
    trials = client.search_runs([exp.experiment_id], f"tags.`{KIND}` = 'trial'")
    assert len(trials) == 3
    for run in trials:        # the baseline trial too: one target and one clock for all
        params = run.data.params
        assert float(params["target_accuracy"]) == found["target_accuracy"] and params["target_from_epoch"] == "0"
        assert int(params["check_every_samples"]) == found["check_every_samples"] and params["probe_size"] == "64"
        if run.data.metrics.get("target_reached") == 1.0:
            assert run.data.metrics["time_to_accuracy_resolution_s"] <= run.data.metrics["time_to_accuracy_s"]

    # the race reuses the calibration's tuned baseline (no lr search of its own) and runs to the same target
    assert main([*args, "--verify"]) == 0
    table = pd.read_csv(path.parent / "out" / "study_calibrated-full-verify.csv")
    assert not table["role"].str.startswith("lr x").any()
    assert set(table.loc[table["role"] == "tuned baseline", "lr_factor"]) == {found["lr_factor"]}
    assert (table["role"] == "winner").sum() >= 2
    report = (path.parent / "out" / "study_calibrated-full-verify.md").read_text()
    assert f"calibrated (study_calibrated-full.json)" in report and "Checked every" in report

    # a recalibration with another result cannot mix its target into the study's trials
    where = calibrated_target.path(spec, "full")
    where.write_text(json.dumps({**found, "target_accuracy": 0.5}))
    assert_one_sentence_exit_2(args, ["was timed to", "another --storage"], capsys)
    study = optuna.load_study(study_name="study_calibrated-full", storage=f"sqlite:///{path.parent / 'optuna.db'}")
    assert study.user_attrs[calibrated_target.ATTR]["target_accuracy"] == found["target_accuracy"]


def test_a_best_lr_at_the_grids_top_grows_the_grid_until_it_is_inside_or_the_doublings_run_out():
    def curve(peak: float):   # accuracy rises with the lr up to `peak`, then falls; records what it ran
        ran: list[float] = []

        def accuracy_at(factor: float) -> float:
            ran.append(factor)
            return 0.6 - 0.05 * abs(math.log2(factor / peak))
        return accuracy_at, ran

    inside, ran = curve(peak=4.0)
    grid = calibrated_target.grown_grid(inside, [1.0, 2.0, 4.0, 8.0], doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge, ran) == (4.0, 0, False, [1.0, 2.0, 4.0, 8.0])

    above, ran = curve(peak=32.0)     # the configured top (8) is short of the best: 16, 32, then 64 falls
    grid = calibrated_target.grown_grid(above, [1.0, 2.0, 4.0, 8.0], doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (32.0, 3, False) and ran[-3:] == [16.0, 32.0, 64.0]

    far, _ = curve(peak=1024.0)       # still rising when the doublings run out: said, not hidden
    grid = calibrated_target.grown_grid(far, [1.0, 2.0], doublings=2)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (8.0, 2, True)

    diverged = calibrated_target.grown_grid(lambda f: float("nan") if f > 2 else 0.3 * f, [1.0, 2.0], doublings=3)
    assert (diverged.tuned, diverged.doublings, diverged.at_edge) == (2.0, 1, False)

    flat = calibrated_target.grown_grid(lambda f: 0.5, [1.0], doublings=3)   # a tie keeps the smaller lr and stops
    assert (flat.tuned, flat.doublings, flat.at_edge) == (1.0, 1, False)
    fixed = calibrated_target.grown_grid(lambda f: 0.5, [1.0], doublings=0)   # no lr of its own: x1 only
    assert (fixed.tuned, fixed.doublings, fixed.at_edge) == (1.0, 0, False)


def test_give_up_after_caps_every_timed_run_at_k_times_the_references_seconds(calibrated, tmp_path):
    path, _, _ = calibrated
    path.write_text(path.read_text().replace("probe_size = 64\n", "probe_size = 64\ngive_up_after = 3\n"))
    spec = study_spec.load(str(path))
    where = calibrated_target.path(spec, "full")
    where.parent.mkdir(parents=True)
    where.write_text(json.dumps({"target_accuracy": 0.8, "check_every_samples": 64, "probe_size": 64,
                                 "lr_factor": 2.0, "reference_time_to_target_s": 12.5}))
    fixed = calibrated_target.applied(spec, "full", {"epochs": 3})
    assert fixed["give_up_after_s"] == 37.5 and fixed["target_accuracy"] == 0.8

    # a study is timed under one cap: resuming it under another is refused like another target
    study = optuna.create_study(directions=["minimize", "maximize"])
    calibrated_target.check_study(study, fixed)
    with pytest.raises(UserError, match="was timed to"):
        calibrated_target.check_study(study, {**fixed, "give_up_after_s": 50.0})
    # without the key (a study file that sets none) the fixed settings carry no cap at all
    path.write_text(path.read_text().replace("give_up_after = 3\n", ""))
    assert "give_up_after_s" not in calibrated_target.applied(study_spec.load(str(path)), "full", {"epochs": 3})
