"""`harness study NAME --verify`: the race: the front's fastest trials and a tuned-lr baseline re-measured
over seeds in fresh processes, to the study's one target, the winner named on the re-measured intervals,
then ablated; resumable (studies/deciding/verify.py)."""

from __future__ import annotations

import math
import textwrap

import optuna
import pandas as pd
import pytest

from experiments import make_config
from harness.specs.cell_spec import Cell
from harness.cli import main
from harness.store.tracking import KIND, Store
from harness.studies import baseline
from harness.studies.deciding import verify
from harness.specs import study_spec
from harness.studies.deciding.verify import ROLE, bootstrap_median, paired_bootstrap_ratio
from conftest import assert_one_sentence_exit_2, mlflow_client

STUDY = """\
    name = "study_verifyme"
    experiment = "recipe"
    metrics = ["time_to_accuracy_s", "test_accuracy"]
    directions = ["minimize", "maximize"]
    n_trials = 3

    [space]
    channels_last = { choices = [false, true] }
    batch_size = { choices = [32, 64] }

    [baseline]
    name = "plain loop"
    target_from_epoch = { full = 2 }
    [baseline.params]
    channels_last = false
    batch_size = 32

    [sampler]
    name = "random"
    seed = 1

    [verify]
    seeds = [0, 1, 2]
    candidates = 2
    lr_factors = [2]
    [verify.changes]
    batch_size = "the optimizer: a bigger batch"

    [base]
    model = "tiny_cnn"
    dataset = "digits"
    train_limit = 256
    test_limit = 128
    optimizer = "adam"
    lr = 0.005
    lr_base_batch = 32
    epochs = 3
    stop_at_target = true
    evals_per_epoch = 2
    threads = 1
    """


def test_bootstrap_intervals_hold_the_median_and_a_missed_target_is_infinite():
    assert bootstrap_median([2.0, 2.0, 2.0]) == (2.0, 2.0)
    lo, hi = bootstrap_median([1.0, 2.0, 3.0, 4.0, 5.0])
    assert lo <= 3.0 <= hi and lo >= 1.0 and hi <= 5.0
    assert bootstrap_median([1.0, math.inf, math.inf])[1] == math.inf
    assert paired_bootstrap_ratio({0: 4.0, 1: 4.0}, {0: 2.0, 1: 2.0}) == (2.0, 2.0, 2.0, [0, 1])


def test_the_ratio_is_paired_by_seed_so_a_hard_seed_for_both_does_not_widen_it():
    """Seed 2 is slow for both recipes (1.5x each): resampled with its pair the ratio stays 2x on every
    draw; resampling the two recipes apart would mix seed 2's slow baseline with a fast winner's run."""
    tuned = {0: 100.0, 1: 104.0, 2: 150.0, 3: 98.0, 4: 102.0}
    winner = {seed: t / 2 for seed, t in tuned.items()}
    x, lo, hi, seeds = paired_bootstrap_ratio(tuned, winner)
    assert (x, lo, hi, seeds) == (2.0, 2.0, 2.0, [0, 1, 2, 3, 4])
    x, lo, hi, seeds = paired_bootstrap_ratio({**tuned, 5: 90.0}, {**winner, 2: math.inf})
    # seed 5 only the baseline ran: left out; seed 2 the winner missed, and in the draws where it is the
    # median the ratio is 0 (the winner never arrives): over 5% of draws, so the interval starts at 0
    assert seeds == [0, 1, 2, 3, 4] and x == 2.0 and lo == 0.0 and 2.0 <= hi < math.inf
    assert paired_bootstrap_ratio({0: 1.0}, {1: 1.0})[3] == []


@pytest.mark.slow
@pytest.mark.multiprocess
def test_verify_retimes_over_seeds_to_the_one_target_and_a_rerun_reuses_every_run(tmp_path, capsys):
    path = tmp_path / "study_verifyme.toml"
    path.write_text(textwrap.dedent(STUDY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]
    assert_one_sentence_exit_2([*args, "--verify"], ["has not been run"], capsys)   # no study yet
    assert main(args) == 0
    study = optuna.load_study(study_name="study_verifyme-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    target = study.user_attrs[baseline.TARGET_ATTR]
    trials = pd.read_csv(tmp_path / "out" / "study_verifyme-full-trials.csv")   # every trial, not only the front
    assert sorted(trials["trial"]) == [0, 1, 2]

    assert main([*args, "--verify"]) == 0
    table = pd.read_csv(tmp_path / "out" / "study_verifyme-full-verify.csv")
    client = mlflow_client(Store(uri))
    exp = client.get_experiment_by_name("study_verifyme")
    runs = client.search_runs([exp.experiment_id], f"tags.`{KIND}` = 'verify'")
    for run in runs:   # one target for every run, and no baseline target of its own
        assert float(run.data.params["target_accuracy"]) == target and run.data.params["target_from_epoch"] == "0"
    roles = table.groupby("role")["seed"].apply(sorted).to_dict()
    assert roles["lr x1"] == roles["lr x2"] == [0]
    # beside the tuned baseline, on the race's first seeds only: the loop at half and twice its lr
    assert roles["tuned lr x/2"] == roles["tuned lr x2"] == [0, 1]
    factor = {role: set(table.loc[table["role"] == role, "lr_factor"]) for role in ("tuned baseline", "tuned lr x/2",
                                                                                     "tuned lr x2")}
    tuned = factor["tuned baseline"].pop()
    assert factor["tuned lr x/2"] == {tuned / 2} and factor["tuned lr x2"] == {tuned * 2}
    # every candidate ran the first two seeds, in rounds with the tuned baseline; the winner ran every round
    raced = table[(table["role"] == "winner") | table["role"].str.startswith("trial ")]
    assert set(raced["trial"]) <= {1, 2} and len(set(raced["trial"])) == 2
    assert roles["winner"][:2] == [0, 1] and roles["tuned baseline"] == roles["winner"]
    assert all(roles[r][:2] == [0, 1] for r in roles if r.startswith("trial "))
    assert {"role", "seed", "time_to_accuracy_s", "reached", "time_to_accuracy_resolution_s"} <= set(table.columns)
    winner = int(table.loc[table["role"] == "winner", "trial"].iloc[0])
    assert {r.data.tags[ROLE] for r in runs} <= set(roles) | {f"trial {winner}"}   # MLflow: the role it raced in
    methods = sorted({role.split(": ")[1] for role in roles if ": " in role})
    assert all(roles[f"alone: {m}"] == roles[f"without: {m}"] == [0] for m in methods)
    for row in table[table["role"].str.endswith("batch_size")].itertuples():
        assert row.changes == "the optimizer: a bigger batch"

    report = (tmp_path / "out" / "study_verifyme-full-verify.md").read_text()
    assert f"Target: test accuracy **{target:.4g}**" in report and "end of epoch 2" in report
    assert "## The race" in report and "in-study inside interval" in report and "95% paired bootstrap interval" in report
    assert "## The tuned lr on this host (seeds 0, 1)" in report
    assert "Winner, named on the re-measured intervals: **trial " in report and "goal (at least 2x" in report

    before = len(runs)
    capsys.readouterr()
    assert main([*args, "--verify"]) == 0   # resumes: every run is reused, none is run again
    assert "reused run" in capsys.readouterr().out
    assert len(client.search_runs([exp.experiment_id], f"tags.`{KIND}` = 'verify'")) == before


def test_a_recipe_that_missed_the_target_has_no_speedup_and_a_multi_field_choice_is_shown_once():
    from harness.studies.deciding.verify import _fmt_speedup, _methods

    assert _fmt_speedup(0.0) == "none (the recipe did not reach the target)"   # not "0x"
    assert _fmt_speedup(math.inf) == "not reached by the baseline"
    assert _fmt_speedup(2.5) == "2.5x"
    params = {"dtype": "bf16", "execution": {"execution": "eager"}, "layout": {"world_size": 1, "threads": 0}}
    assert _methods(None, params) == "dtype=bf16, execution=eager, world_size=1 threads=0"
    labels = {"dtype": "bf16", "execution": "execution=eager", "layout": "world_size=1 threads=0"}   # as Optuna keeps them
    assert _methods(None, labels) == "dtype=bf16, execution=eager, world_size=1 threads=0"


def test_in_a_study_that_searches_lr_factor_the_tuned_baseline_is_the_same_run_as_that_factor_alone():
    from harness.training.train import lr_effective

    # the shipped speed-recipe study searches lr_factor itself: the verification's lr search must set that
    # field (not lr), and each row must keep the factor over the book's lr, not the params' own 1.0
    spec = study_spec.load("study_speed_recipe")
    fixed = {**spec.fixed("smoke"), "target_from_epoch": 0, "target_accuracy": 0.5}
    book = {k: v for k, v in spec.baseline.params.items()}
    tuned = verify._values(spec, fixed, verify.Variant("tuned baseline", book, 8.0), 0)
    alone = verify._values(spec, fixed, verify.Variant("alone: lr_factor", {**book, "lr_factor": 8.0}), 0)
    assert tuned["lr_factor"] == 8.0 and tuned["lr"] == fixed["lr"]
    assert make_config(tuned).cell_id() == make_config(alone).cell_id()
    cell = Cell.build(tuned, "tuned")
    logged = {"target_reached": 1.0, verify.TIME: 2.0, "lr_effective": lr_effective(cell.config)}
    row = verify._row(spec, verify.Variant("lr x8", book, 8.0), 0, cell, logged, "r")
    # the lr is the one the cell logged it trained with (recipe's rule, batch scaling included), not
    # the study's lr times the factor worked out again here
    assert row["lr_factor"] == 8.0 and row["lr"] == logged["lr_effective"]
    assert lr_effective(cell.config) == lr_effective(make_config({**fixed, "lr_factor": 8.0}))
    best = verify._row(spec, verify.Variant("best", {**book, "lr_factor": 32.0}), 0, cell, {}, "r")
    assert best["lr_factor"] == 32.0 and best[verify.TIME] == math.inf


def test_the_tuned_baselines_neighbours_run_beside_it_on_the_first_seeds_and_the_ratio_is_against_it_alone():
    from types import SimpleNamespace

    spec = study_spec.load("study_speed_recipe")       # [verify] neighbour_seeds = 2 of its first 5 seeds
    book = dict(spec.baseline.params)
    tuned = verify.Variant(verify.TUNED, book, 64.0)
    beside = verify._beside(tuned)
    assert [(v.role, v.lr_factor, v.params) for v in beside] == [("tuned lr x/2", 32.0, book),
                                                                 ("tuned lr x2", 128.0, book)]
    assert verify._beside(verify.Variant(spec.baseline.name, book)) == []   # no lr to tune (airbench): none

    # two candidates that tie race on past the first seeds; x2 is the fastest of all, but never a candidate
    seconds = {verify.TUNED: 50.0, "tuned lr x/2": 55.0, "tuned lr x2": 1.0, "trial 4": 10.0, "trial 5": 10.0}
    ran, runs = [], []

    def timed(variant, seed):
        ran.append((variant.role, seed))
        row = {"role": variant.role, "seed": seed, verify.TIME: seconds[variant.role]}
        runs.append(row)
        return row

    labels = {k: spec.space[k].optuna_value(v) for k, v in book.items()}
    candidates = [SimpleNamespace(number=n, params=labels) for n in (4, 5)]
    result = verify._race(spec, candidates, tuned, beside, runs, timed)
    assert ran[:5] == [(verify.TUNED, 0), ("tuned lr x/2", 0), ("tuned lr x2", 0), ("trial 4", 0), ("trial 5", 0)]
    by_role = {role: [s for r, s in ran if r == role] for role, _ in ran}
    assert by_role["tuned lr x/2"] == by_role["tuned lr x2"] == [0, 1] and len(by_role[verify.TUNED]) > 3
    assert result.reference.name == verify.TUNED and set(result.reference.times) == {50.0}
    assert set(result.entrants) == {"trial 4", "trial 5"}


AIRBENCH_STUDY = """\
    name = "study_airbenchrace"
    experiment = "airbench"
    metrics = ["time_to_accuracy_s", "test_accuracy"]
    directions = ["minimize", "maximize"]
    n_trials = 3

    [space]
    airbench_tta_level = { choices = [0, 2] }
    airbench_lr_scale = { choices = [0.7, 1.0] }

    [baseline]
    name = "airbench94 as published"
    [baseline.params]
    airbench_tta_level = 2
    airbench_lr_scale = 1.0

    [sampler]
    name = "random"
    seed = 4               # both sampled trials change both fields (seed 3 samples the baseline twice)

    [verify]
    seeds = [0, 1]
    candidates = 1
    first_seeds = 2

    [base]
    dataset = "digits"
    test_limit = 128
    airbench_base_width = 8
    batch_size = 128
    epochs = 3
    airbench_epochs = 3.0
    target_accuracy = 0.3
    stop_at_target = true
    threads = 1
    """


@pytest.mark.slow
@pytest.mark.multiprocess
def test_an_airbench_study_with_a_fixed_target_races_its_published_recipe_and_ablates_the_winner(tmp_path):
    """airbench sets its own optimiser (no `lr` field) and a study file may give a fixed target
    instead of a baseline's or a calibrated one: both race and ablate."""
    path = tmp_path / "study_airbenchrace.toml"
    path.write_text(textwrap.dedent(AIRBENCH_STUDY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    assert main([*args, "--verify"]) == 0
    table = pd.read_csv(tmp_path / "out" / "study_airbenchrace-full-verify.csv")
    roles = table.groupby("role")["seed"].apply(sorted).to_dict()
    assert roles["airbench94 as published"] == [0, 1] and roles["winner"] == [0, 1]
    assert table["lr"].isna().all()   # no lr of its own to show
    changed = {role.split(": ")[1] for role in roles if ": " in role}
    assert changed and changed <= {"airbench_tta_level", "airbench_lr_scale"}
    assert all(roles[f"alone: {m}"] == roles[f"without: {m}"] == [0] for m in changed)


def test_in_a_study_that_searches_lr_factor_each_method_alone_is_added_to_the_tuned_baseline():
    # At the book's untuned lr a method alone never reaches a target the tuned loop sets: it would spend
    # the whole budget to say so. Each is measured where the race measured the reference instead.
    spec = study_spec.load("study_speed_recipe")
    book = dict(spec.baseline.params)
    tuned = verify.Variant("tuned baseline", book, 32.0)
    reference = verify._ablation_reference(spec, book, tuned)
    assert reference["lr_factor"] == 32.0 and {k: v for k, v in reference.items() if k != "lr_factor"} == \
        {k: v for k, v in book.items() if k != "lr_factor"}
    winner = {**book, "dtype": "bf16", "batch_size": 128, "lr_factor": 32.0}
    ran = []
    methods = verify._ablation(spec, reference, winner, lambda variant, seed: ran.append((variant, seed)))
    assert methods == ["dtype", "batch_size"]      # the tuned lr is the reference's, not a method of the winner
    alone = {v.role: v for v, _ in ran}
    assert alone["alone: dtype"].params == {**reference, "dtype": "bf16"} and alone["alone: dtype"].lr_factor == 1.0
    assert alone["without: batch_size"].params == {**winner, "batch_size": 64}
    fixed = {**spec.fixed("smoke"), "target_from_epoch": 0, "target_accuracy": 0.5}
    same = verify._values(spec, fixed, verify.Variant("alone: lr_factor", {**reference}), 0)
    assert make_config(same).cell_id() == make_config(verify._values(spec, fixed, tuned, 0)).cell_id()
    # a study without lr_factor in its space (airbench: no lr of its own) ablates against its baseline's params
    airbench = study_spec.load("study_airbench_cpu")
    own = dict(airbench.baseline.params)
    assert verify._ablation_reference(airbench, own, verify.Variant("airbench94 as published", own)) == own
