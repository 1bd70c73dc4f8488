"""A target that ranks (studies/deciding/calibrated_target.py; the trials read it through
studies/trial_target.py): measured from the study's tuned baseline by
`harness study NAME --calibrate-target`, written beside the study's results, and the one target (with its
fine clock) of every trial; a calibrated scale without its file is refused before anything runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import optuna
import pandas as pd
import pytest

from harness import folders
from harness.cli import main
from harness.errors import UserError
from harness.store.tracking import KIND, Store
from harness.specs import study_spec
from harness.studies import trial_target
from harness.studies.deciding import calibrated_target
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
    assert trial_target.applied(spec, "smoke", {"epochs": 3}) == {"epochs": 3}
    assert spec.fixed("smoke")["target_from_epoch"] == 2 and spec.fixed("cpu")["target_from_epoch"] == 0
    # airbench's CPU study opts in at cpu only: refused there without its file, smoke untouched
    airbench = study_spec.load("study_airbench_cpu")
    assert trial_target.calibrated_at(airbench, "cpu") and not trial_target.calibrated_at(airbench, "smoke")
    with pytest.raises(UserError, match="does not exist"):
        trial_target.applied(airbench, "cpu", airbench.fixed("cpu"))
    bad = path.read_text().replace("epochs = { smoke = 2,", "epochs = { huge = 2, smoke = 2,")
    path.write_text(bad)
    assert_one_sentence_exit_2(args, ["[target] names scale 'huge'"], capsys)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_target_is_the_best_lrs_and_the_tuned_lr_the_fastest_to_it_and_every_trial_is_timed_to_it(calibrated, capsys):
    path, uri, args = calibrated
    assert main([*args, "--calibrate-target"]) == 0
    spec = study_spec.load(str(path))
    found = json.loads(trial_target.path(spec, "full").read_text())
    runs = found["runs"]
    lr = [r for r in runs if r["step"] == "lr"]
    by_factor = {r["lr_factor"]: r["best_test_accuracy"] for r in lr}
    grew = by_factor[2.0] > by_factor[1.0]   # the top of the grid [1, 2] was the best: it doubled once
    assert sorted(by_factor) == ([1.0, 2.0, 4.0] if grew else [1.0, 2.0]) and all(r["seed"] == 0 for r in lr)
    best = max(lr, key=lambda r: (r["best_test_accuracy"], -r["lr_factor"]))
    assert found["best_accuracy_at_grid_edge"] == (grew and best["lr_factor"] == 4.0)
    assert found["best_accuracy_lr_factor"] == best["lr_factor"]
    bests = sorted([best["best_test_accuracy"], *(r["best_test_accuracy"] for r in runs if r["step"] == "seed")])
    assert found["target_accuracy"] == pytest.approx(sum(bests) / 2 - 0.02, abs=1e-4)   # the median of 2 seeds
    # the fine clock: a check every 2% of the best-accuracy factor's training samples to the target (a step at least)
    assert found["check_every_samples"] == max(32, int(0.02 * found["samples_to_target"]))
    assert found["probe_size"] == 64 and found["within_epochs"] == 2 and found["resolution"] == 0.02

    # the tuned lr is the fastest to the target over the seeds, timed outward from the best-accuracy factor
    speed = [r for r in runs if r["step"] == "speed"]
    times = {row["lr_factor"]: row for row in found["lr_times_to_target"]}
    assert {best["lr_factor"] / 2, best["lr_factor"], best["lr_factor"] * 2} <= set(times)
    assert sorted({r["lr_factor"] for r in speed}) == sorted(times) and len(speed) == 2 * len(times)
    for factor, row in times.items():
        seconds = [r["time_to_accuracy_s"] for r in speed if r["lr_factor"] == factor]
        assert row["seeds"] == [0, 1] and row["time_to_target_s"] == seconds
        # a run that missed the target counts as slower than any that reached it: a median of 2 with one is none
        assert row["median_s"] == (None if None in seconds else pytest.approx(sum(seconds) / 2))
    median = {f: math.inf if row["median_s"] is None else row["median_s"] for f, row in times.items()}
    tuned = found["lr_factor"]
    assert tuned == min(median, key=lambda f: (median[f], f)) and found["reference_time_to_target_s"] == median[tuned]
    assert found["lr_neighbours"] == [tuned / 2, tuned * 2] and "seeds 0, 1" in found["reference_time_to_target_is"]
    assert found["lr_at_grid_edge"] == (tuned in (min(times), max(times)))   # else a slower neighbour each side
    assert found["lr_timing_doublings"] == len(times) - 3 <= 1                 # [target] lr_doublings = 1
    recompute = subprocess.run([sys.executable, str(folders.REPO_ROOT / "results" / "targets" / "recompute.py"),
                                str(trial_target.path(spec, "full")), str(path.parent / "mlflow.db")],
                               capture_output=True, text=True, timeout=60)
    assert recompute.returncode == 0, recompute.stdout + recompute.stderr

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
    again = json.loads(trial_target.path(spec, "full").read_text())
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
    # its neighbours run beside it on the race's first seeds (the [verify] default, 2), on this host
    beside = table[table["role"].str.startswith("tuned lr x")].groupby("role")
    assert beside["seed"].apply(sorted).to_dict() == {"tuned lr x/2": [0, 1], "tuned lr x2": [0, 1]}
    assert beside["lr_factor"].first().to_dict() == {"tuned lr x/2": tuned / 2, "tuned lr x2": tuned * 2}
    assert (table["role"] == "winner").sum() >= 2
    report = (path.parent / "out" / "study_calibrated-full-verify.md").read_text()
    assert f"calibrated (study_calibrated-full.json)" in report and "Checked every" in report
    assert "## The tuned lr on this host (seeds 0, 1)" in report

    # a recalibration with another result cannot mix its target into the study's trials
    where = trial_target.path(spec, "full")
    where.write_text(json.dumps({**found, "target_accuracy": 0.5}))
    assert_one_sentence_exit_2(args, ["was timed to", "another --storage"], capsys)
    study = optuna.load_study(study_name="study_calibrated-full", storage=f"sqlite:///{path.parent / 'optuna.db'}")
    assert study.user_attrs[trial_target.ATTR]["target_accuracy"] == found["target_accuracy"]


def test_a_best_lr_at_the_grids_top_grows_the_grid_until_it_is_inside_or_the_doublings_run_out():
    def curve(peak: float):   # accuracy rises with the lr up to `peak`, then falls; records what it ran
        ran: list[float] = []

        def accuracy_at(factor: float) -> float:
            ran.append(factor)
            return 0.6 - 0.05 * abs(math.log2(factor / peak))
        return accuracy_at, ran

    inside, ran = curve(peak=4.0)
    grid = calibrated_target.grown_grid(inside, [1.0, 2.0, 4.0, 8.0], doublings=3)
    assert (grid.best, grid.doublings, grid.at_edge, ran) == (4.0, 0, False, [1.0, 2.0, 4.0, 8.0])

    above, ran = curve(peak=32.0)     # the configured top (8) is short of the best: 16, 32, then 64 falls
    grid = calibrated_target.grown_grid(above, [1.0, 2.0, 4.0, 8.0], doublings=3)
    assert (grid.best, grid.doublings, grid.at_edge) == (32.0, 3, False) and ran[-3:] == [16.0, 32.0, 64.0]

    far, _ = curve(peak=1024.0)       # still rising when the doublings run out: said, not hidden
    grid = calibrated_target.grown_grid(far, [1.0, 2.0], doublings=2)
    assert (grid.best, grid.doublings, grid.at_edge) == (8.0, 2, True)

    diverged = calibrated_target.grown_grid(lambda f: float("nan") if f > 2 else 0.3 * f, [1.0, 2.0], doublings=3)
    assert (diverged.best, diverged.doublings, diverged.at_edge) == (2.0, 1, False)

    flat = calibrated_target.grown_grid(lambda f: 0.5, [1.0], doublings=3)   # a tie keeps the smaller lr and stops
    assert (flat.best, flat.doublings, flat.at_edge) == (1.0, 1, False)
    fixed = calibrated_target.grown_grid(lambda f: 0.5, [1.0], doublings=0)   # no lr of its own: x1 only
    assert (fixed.best, fixed.doublings, fixed.at_edge) == (1.0, 0, False)


def _clock(seconds_at):
    """A fake time_at(factor, seed) from a table of a factor's seconds; records the runs it was asked for."""
    ran: list[tuple[float, int]] = []

    def time_at(factor: float, seed: int) -> float | None:
        ran.append((factor, seed))
        return seconds_at(factor, seed)
    return time_at, ran


def _valley(fastest: float, seconds: float = 50.0):
    """Seconds to the target rise by 10 s each doubling or halving away from `fastest` (seed noise 0.1 s)."""
    return lambda factor, seed: seconds + 10 * abs(math.log2(factor / fastest)) + 0.1 * seed


SEEDS = [0, 1, 2]


def test_the_tuned_lr_is_the_fastest_to_the_target_once_it_has_a_slower_neighbour_on_both_sides():
    # the best-accuracy factor is the fastest too: its two neighbours, seed by seed, and nothing more
    time_at, ran = _clock(_valley(fastest=32.0))
    grid = calibrated_target.fastest_lr(time_at, 32.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (32.0, 0, False)
    assert ran == [(f, s) for s in SEEDS for f in (16.0, 32.0, 64.0)]
    assert grid.times[64.0] == [60.0, 60.1, 60.2] and grid.median(32.0) == 50.1

    # faster above the best-accuracy factor (the colleague's x32 -> x64): the grid grows up one doubling,
    # every seed of it, and stops as soon as x64 is inside
    time_at, ran = _clock(_valley(fastest=64.0))
    grid = calibrated_target.fastest_lr(time_at, 32.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (64.0, 1, False)
    assert sorted(grid.times) == [16.0, 32.0, 64.0, 128.0] and ran[9:] == [(128.0, s) for s in SEEDS]
    assert calibrated_target.lr_neighbours(grid.tuned) == (32.0, 128.0)

    # far above: it keeps doubling while the fastest is the top one timed
    grid = calibrated_target.fastest_lr(_valley(fastest=256.0), 32.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (256.0, 3, False) and max(grid.times) == 512.0


def test_the_timing_grows_down_when_the_fastest_is_the_lowest_factor_timed():
    time_at, ran = _clock(_valley(fastest=4.0))
    grid = calibrated_target.fastest_lr(time_at, 16.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (4.0, 2, False)
    assert sorted(grid.times) == [2.0, 4.0, 8.0, 16.0, 32.0] and [f for f, _ in ran[9:]] == [4.0] * 3 + [2.0] * 3


def test_a_run_that_missed_the_target_is_slower_than_any_that_reached_it():
    table = {16.0: [70.0, 71.0, 72.0], 32.0: [54.3, 69.1, 54.5], 64.0: [41.9, 66.9, 44.7],
             128.0: [82.5, None, 49.9],      # the colleague's x128: one seed missed, ranked on the others
             256.0: [30.0, None, None]}      # the fastest single run, but the target missed at its median
    grid = calibrated_target.fastest_lr(lambda f, s: table[f][s], 32.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (64.0, 1, False)
    assert grid.times[128.0] == [82.5, math.inf, 49.9] and grid.median(128.0) == 82.5

    # a faster median with one miss still wins: the median ranks the miss as the slowest draw, no more
    table[128.0] = [40.0, None, 43.0]
    grid = calibrated_target.fastest_lr(lambda f, s: table[f][s], 32.0, SEEDS, doublings=3)
    assert (grid.tuned, grid.median(128.0), grid.median(256.0)) == (128.0, 43.0, math.inf) and not grid.at_edge

    # nothing reached at the fastest's median: nothing to grow towards (the caller refuses the target)
    never = calibrated_target.fastest_lr(lambda f, s: None, 32.0, SEEDS, doublings=3)
    assert (never.doublings, never.at_edge, math.isinf(never.median(never.tuned))) == (0, False, True)


def test_the_doublings_of_the_timing_are_capped_and_a_fastest_still_at_the_edge_is_said():
    time_at, ran = _clock(lambda factor, seed: 1000.0 / factor)   # faster with every doubling, past any cap
    grid = calibrated_target.fastest_lr(time_at, 32.0, SEEDS, doublings=2)
    assert (grid.tuned, grid.doublings, grid.at_edge) == (256.0, 2, True) and len(ran) == 5 * 3
    none = calibrated_target.fastest_lr(lambda factor, seed: 1000.0 / factor, 32.0, SEEDS, doublings=0)
    assert (none.tuned, none.doublings, none.at_edge) == (64.0, 0, True)

    # an experiment without an lr of its own (airbench): only its one factor, timed on every seed
    time_at, ran = _clock(lambda factor, seed: 100.0 + seed)
    alone = calibrated_target.fastest_lr(time_at, 1.0, SEEDS, doublings=3, neighbours=False)
    assert (alone.tuned, alone.doublings, alone.at_edge, ran) == (1.0, 0, False, [(1.0, s) for s in SEEDS])


def test_give_up_after_caps_every_timed_run_at_k_times_the_references_seconds(calibrated, tmp_path):
    path, _, _ = calibrated
    path.write_text(path.read_text().replace("probe_size = 64\n", "probe_size = 64\ngive_up_after = 3\n"))
    spec = study_spec.load(str(path))
    where = trial_target.path(spec, "full")
    where.parent.mkdir(parents=True)
    where.write_text(json.dumps({"target_accuracy": 0.8, "check_every_samples": 64, "probe_size": 64,
                                 "lr_factor": 2.0, "reference_time_to_target_s": 12.5}))
    fixed = trial_target.applied(spec, "full", {"epochs": 3})
    assert fixed["give_up_after_s"] == 37.5 and fixed["target_accuracy"] == 0.8

    # a study is timed under one cap: resuming it under another is refused like another target
    study = optuna.create_study(directions=["minimize", "maximize"])
    trial_target.check_study(study, fixed)
    with pytest.raises(UserError, match="was timed to"):
        trial_target.check_study(study, {**fixed, "give_up_after_s": 50.0})
    # without the key (a study file that sets none) the fixed settings carry no cap at all
    path.write_text(path.read_text().replace("give_up_after = 3\n", ""))
    assert "give_up_after_s" not in trial_target.applied(study_spec.load(str(path)), "full", {"epochs": 3})
