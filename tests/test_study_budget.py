"""A study that decides within a budget: trials stopped when they cannot win (PRUNED, with why), one
wall-clock budget for the search and the race kept in the study's storage, the search stopped when
what is left is what the race needs, the race cut short said so, and every budget mistake one
sentence before anything runs. Tiny CNN on synthetic images: seconds."""

from __future__ import annotations

import math
import textwrap

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from harness.cli import main
from harness.specs.study_spec import StudySpec
from harness.studies import budget, incumbent
from harness.studies.deciding import race
from harness.studies.budget import Budget
from conftest import assert_one_sentence_exit_2

STUDY = """\
    name = "study_tinybudget"
    experiment = "recipe"
    metric = "time_to_accuracy_s"
    direction = "minimize"
    n_trials = 5

    [space]
    lr_factor = { choices = [1.0, 0.0001] }
    batch_size = { choices = [32, 64] }

    [baseline]
    name = "plain loop"
    target_from_epoch = 1
    [baseline.params]
    lr_factor = 1.0
    batch_size = 32

    [sampler]
    name = "random"
    seed = 3

    [verify]
    seeds = [0, 1, 2]
    candidates = 1
    first_seeds = 2
    ablation_seeds = 1

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
    evals_per_epoch = 4
    threads = 1
    """


def _write(folder, replace=()):
    text = textwrap.dedent(STUDY)
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = folder / "study_tinybudget.toml"
    path.write_text(text)
    return path


def _load(tmp_path, name="study_tinybudget-full"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'optuna.db'}")


# --- the budget's arithmetic ------------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                           ("5400", 5400), ("1.5h", 5400), ("10min", 600)])
def test_a_budget_reads_as_a_reader_writes_it(text, seconds):
    assert budget.parse(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "-1h", "0", "1h30", "two hours", "1e9999h"])
def test_a_budget_that_is_not_a_duration_is_refused(text):
    from harness.errors import UserError

    with pytest.raises(UserError, match="--budget must be"):
        budget.parse(text)


def test_the_race_need_counts_its_runs_and_prices_them_from_the_measured_times():
    spec = StudySpec.model_validate({"name": "study_x", "experiment": "recipe", "metric": "time_to_accuracy_s",
                                     "direction": "minimize", "space": {"lr_factor": {"choices": [1.0, 2.0]}},
                                     "verify": {"seeds": [0, 1, 2, 3, 4], "candidates": 3, "first_seeds": 3,
                                                "budget": 12, "ablation_seeds": 2}})
    need = budget.race_need(spec.verify, reference_s=50.0, incumbent_s=20.0, overhead_s=5.0, methods=4,
                            neighbour_runs=6)
    assert (need.tuned_runs, need.candidate_runs, need.ablation_runs) == (5 + 6, 12, 2 * 4 * 2)
    assert need.seconds == pytest.approx(budget.MARGIN * (11 * 55 + 12 * 25 + 16 * 40))
    slower = budget.race_need(spec.verify, reference_s=50.0, incumbent_s=None, overhead_s=5.0, methods=4,
                              neighbour_runs=6)
    assert slower.seconds > need.seconds   # before an incumbent, candidates are priced as the tuned loop


def test_the_budget_is_kept_in_the_study_and_a_resumed_study_spends_only_what_is_left():
    study = optuna.create_study()
    lines = []
    kept = Budget.open(study, 3600.0, lines.append)
    kept.spend(1000.0)
    again = Budget.open(study, None, lines.append)   # resumed without --budget: the stored one holds
    assert again.total_s == 3600 and again.spent_s == 1000 and again.left_s == 2600 and again.phase == budget.SEARCH
    Budget.open(study, 7200.0, lines.append)
    assert "budget changed from 1h to 2h" in lines[-1]
    assert Budget.open(optuna.create_study(), None, print) is None
    assert budget.status_line(study.user_attrs) == "budget 2h: 17m spent, 1h43m left; phase: search"


def test_a_budget_that_cannot_hold_a_tuned_run_or_the_race_is_refused():
    from harness.errors import UserError

    need = budget.RaceNeed(10, 10, 4, seconds=1800.0)
    with pytest.raises(UserError, match="smaller than one run of the tuned loop"):
        budget.check_affords(55.0, reference_s=50.0, need=need, overhead=10.0)
    with pytest.raises(UserError, match="smaller than the race alone needs"):
        budget.check_affords(1200.0, reference_s=50.0, need=need, overhead=10.0)
    budget.check_affords(3600.0, reference_s=50.0, need=need, overhead=10.0)


# --- the incumbent's limit ----------------------------------------------------------------------------
def _trial(value=None, state=TrialState.COMPLETE):
    return create_trial(state=state, value=value, params={"lr_factor": 1.0},
                        distributions={"lr_factor": CategoricalDistribution([1.0, 2.0])})


def test_a_trial_gets_k_times_the_incumbents_time_or_the_cap_whichever_is_smaller():
    spec = StudySpec.model_validate({"name": "study_x", "experiment": "recipe", "metric": "time_to_accuracy_s",
                                     "direction": "minimize", "prune_after": 1.5,
                                     "space": {"lr_factor": {"choices": [1.0, 2.0]}}})
    study = optuna.create_study()
    values = {"target_accuracy": 0.6, "give_up_after_s": 100.0}
    assert incumbent.limit(spec, study, values) == (100.0, pytest.approx(incumbent.limit(spec, study, values)[1]))
    for trial in (_trial(40.0), _trial(float("inf")), _trial(state=TrialState.PRUNED), _trial(30.0)):
        study.add_trial(trial)
    seconds, why = incumbent.limit(spec, study, values)
    assert seconds == pytest.approx(45.0) and "1.5x the incumbent's 30 s" in why and "trial 3" in why
    assert incumbent.limit(spec, study, {**values, "give_up_after_s": 20.0})[0] == 20.0
    assert incumbent.limit(spec, study, {"give_up_after_s": 20.0}) is None   # no target: nothing to give up on
    two = spec.model_copy(update={"metrics": ["time_to_accuracy_s", "test_accuracy"],
                                  "directions": ["minimize", "maximize"]})
    assert incumbent.limit(two, study, values) is None    # Optuna cannot prune a multi-objective study


def test_k_below_one_is_one_sentence(tmp_path, capsys):
    path = _write(tmp_path, [('n_trials = 5', 'n_trials = 5\n    prune_after = 0.5')])
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                               ["prune_after"], capsys)


@pytest.mark.parametrize("args, words", [
    (["--budget", "2x"], ["--budget must be a duration"]),
    (["--budget", "0"], ["--budget must be more than 0"]),
    (["--budget", "1h", "--status"], ["--budget is for running a study"]),
    (["--budget", "1h", "--workers", "2"], ["run it without --workers"]),
])
def test_budget_mistakes_are_one_sentence_before_anything_runs(tmp_path, capsys, args, words):
    path = _write(tmp_path)
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", *args],
                               words, capsys)
    assert not (tmp_path / "optuna.db").exists()


def test_a_budget_smaller_than_the_calibrated_race_is_refused_before_any_trial(tmp_path, capsys, monkeypatch):
    from harness.studies import trial_target

    monkeypatch.setattr(trial_target, "read", lambda spec, scale: {"reference_time_to_target_s": 50.0})
    path = _write(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", uri, "--budget", "55s"],
                               ["smaller than one run of the tuned loop"], capsys)
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", uri, "--budget", "10m"],
                               ["smaller than the race alone needs", "runs"], capsys)
    assert not (tmp_path / "optuna.db").exists()


# --- a race cut by the clock ----------------------------------------------------------------------------
def test_a_race_cut_by_the_budget_says_so_and_names_no_winner_on_fewer_than_three_seeds():
    times = {"a": 10.0, "b": 11.0, "ref": 30.0}
    rounds = []

    def affordable(names, seed):
        rounds.append(names)
        return len(rounds) <= 2   # two rounds fit, the third does not

    result = race.race(["a", "b"], lambda name, seed: times[name], seeds=[0, 1, 2, 3, 4], first=3,
                       reference="ref", affordable=affordable)
    assert result.cut and not result.named and result.stop.startswith("race cut: 2 of 5 seeds")
    assert len(result.entrants["a"].times) == 2
    full = race.race(["a", "b"], lambda name, seed: times[name], seeds=[0, 1, 2, 3, 4], first=3, reference="ref",
                     affordable=lambda names, seed: True)
    assert not full.cut and full.named


# --- the study on digits-sized data: pruning, the budget split, resume ---------------------------------
@pytest.mark.slow
def test_trials_that_cannot_win_are_pruned_with_why_and_the_budget_leaves_the_race_its_time(tmp_path, capsys):
    # a ceiling no search reaches in 75 s (a warm fork server runs a trial of this size in about 0.3 s),
    # so the budget is what stops it
    path = _write(tmp_path, [("n_trials = 5", "n_trials = 5000")])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "out"
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(out),
                 "--budget", "75s"]) == 0
    said = capsys.readouterr().out
    assert "no more trials: " in said and "the race needs about" in said
    assert "stopped: the budget left is what the race needs" in said
    study = _load(tmp_path)
    trials = study.trials
    finished = [t for t in trials if t.state.is_finished()]
    slow = [t for t in finished if t.params["lr_factor"] == 0.0001 and not t.user_attrs.get("harness.baseline")]
    fast = [t for t in finished if t.params["lr_factor"] == 1.0 and not t.user_attrs.get("harness.baseline")]
    assert slow and fast and len(finished) < 5000, [t.params for t in trials]
    for t in slow:   # an lr 10,000 times too small never reaches the target: stopped, not failed
        assert t.state == TrialState.PRUNED
        why = t.user_attrs[incumbent.PRUNED_ATTR]
        given = t.user_attrs[incumbent.LIMIT_ATTR]   # the baseline reached the target first: every trial has one
        assert why["best_test_accuracy"] is not None and "short of the target" in why["reason"]
        assert given["limit_s"] <= why["train_time_s"] <= given["limit_s"] + 2 * _step_s(t)
        assert "1.5x the incumbent's" in given["why"]
    kept = Budget(study)
    assert kept.phase == budget.DONE and 60 < kept.spent_s < 75 + 10   # the last run may end a little past it
    assert all(t.user_attrs.get(budget.WALL_ATTR, 0) > 0 for t in finished)
    assert "## The race" in (out / "study_tinybudget-full-verify.md").read_text()
    report = (out / "study_tinybudget-full.md").read_text()
    assert "pruned (stopped short of the target" in report and "budget 75s:" in report
    listed = pd.read_csv(out / "study_tinybudget-full-trials.csv")
    assert listed.loc[listed["state"] == "pruned", "time_to_accuracy_s"].isna().all()   # no accuracy as a time

    # the same command again spends only what is left: no trial starts, the race reuses its runs (a
    # finished run costs the spent budget nothing, so the race is not cut and its page is the same)
    spent, count = kept.spent_s, len(trials)
    raced = _race_lines((out / "study_tinybudget-full-verify.md").read_text())
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(out),
                 "--budget", "75s"]) == 0
    study = _load(tmp_path)
    assert len(study.trials) == count
    assert Budget(study).spent_s - spent < 10
    assert "the search is over (phase: done)" in capsys.readouterr().out
    assert _race_lines((out / "study_tinybudget-full-verify.md").read_text()) == raced


def _race_lines(page: str) -> list[str]:
    """The race's and the ablation's tables and the winner's lines of a race page."""
    return [line for line in page.splitlines() if line.startswith(("|", "Winner", "**No winner", "- over", "- goal"))]


def _step_s(trial) -> float:
    """A check's worth of slack: the limit is read at the accuracy checks, four an epoch here."""
    return max(1.0, trial.user_attrs.get(budget.CLOCK_ATTR, 1.0) / 4)


# --- method cards ---------------------------------------------------------------------------------------
def test_a_method_card_pairs_its_runs_by_seed_with_the_tuned_loop_and_the_winner():
    from harness.studies.deciding import method_cards

    rows = [{"role": role, "seed": seed, "time_to_accuracy_s": t} for role, seed, t in [
        ("tuned baseline", 0, 60.0), ("tuned baseline", 1, 66.0), ("tuned baseline", 2, 54.0),
        ("winner", 0, 20.0), ("winner", 1, 22.0), ("winner", 2, 18.0),
        ("alone: dtype", 0, 30.0), ("alone: dtype", 1, 33.0), ("alone: dtype", 2, math.inf),
        ("without: dtype", 0, 40.0), ("without: dtype", 1, 44.0),
    ]]
    assert method_cards.paired_ratios({0: 60.0, 1: 66.0, 2: 54.0}, {0: 30.0, 1: 33.0, 2: math.inf}) == [2.0, 2.0, 0.0]
    text = method_cards.card("dtype", "bf16", rows, "tuned baseline", "arithmetic: bf16 autocast")
    assert "### `dtype` = bf16" in text and "arithmetic: bf16 autocast" in text
    assert "**2x** (interval not reached to 2x, 3 seeds)" in text      # the seed that missed reads 0
    assert "**2x** (interval 2x to 2x, 2 seeds)" in text                # left out: 40/20 and 44/22
    cut = method_cards.card("sparsity", 0.25, rows, "tuned baseline", "")
    assert "not measured (the ablation was cut before it)" in cut and "only how fast a step runs" in cut
