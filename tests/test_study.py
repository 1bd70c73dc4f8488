"""Studies in one process against real SQLite stores (MLflow and Optuna), on the tiny CNN."""

import re

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from harness.cli import main
from harness.studies.trial_tags import STUDY, TRIAL
from harness.store.tracking import CELL_ID, OUTCOME, PARENT, Store
from conftest import mlflow_client

LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


def _run(path, folder, *args):
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    code = main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(folder / "reports"), *args])
    return code, Store(uri), optuna.load_study(study_name=path.stem.removeprefix("study_") + "-full",
                                               storage=f"sqlite:///{folder / 'optuna.db'}")


def _children(store, experiment, study_name):
    exp = mlflow_client(store).get_experiment_by_name(experiment)
    runs = mlflow_client(store).search_runs([exp.experiment_id], f"tags.`{STUDY}` = '{study_name}'")
    return [r for r in runs if PARENT in r.data.tags], [r for r in runs if PARENT not in r.data.tags]


def test_trials_are_child_runs_named_like_grid_cells_and_a_rerun_continues(study_file, tmp_path, capsys):
    path = study_file("resume", space=LR + 'batch_size = { choices = [16, 32] }\n', n_trials=3, base={"epochs": 1})
    code, store, study = _run(path, tmp_path)
    assert code == 0
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    children, parents = _children(store, "resume", "resume-full")
    assert len(children) == 3 and len(parents) == 1
    # optuna-dashboard names the objective and links back to MLflow
    assert study.metric_names == ["test_accuracy"]
    assert study.user_attrs["mlflow_parent_run_id"] == parents[0].info.run_id
    assert study.user_attrs["mlflow_experiment_id"] == parents[0].info.experiment_id
    # every MLflow link the study writes opens the model-training view (harness/ui_links.py)
    links = re.findall(r"\]\((#/[^)]+)\)", store.experiment_description(parents[0].info.experiment_id))
    assert links and all(link.endswith("?workflowType=machine_learning") for link in links), links
    assert study.user_attrs["mlflow_runs_table"].endswith("/runs?workflowType=machine_learning")
    for run in children:
        assert run.data.tags[PARENT] == parents[0].info.run_id
        assert run.data.tags[OUTCOME] == "ok" and run.data.tags[CELL_ID]
        for key in ("experiment", "model", "lr", "batch_size", "sparsity", "epochs", "threads"):
            assert key in run.data.params  # the grid's param names
        for key in ("test_accuracy", "train_time_s", "param_count", "peak_rss_mb"):
            assert key in run.data.metrics
        trial = study.trials[int(run.data.tags[TRIAL])]
        assert float(run.data.params["lr"]) == pytest.approx(trial.params["lr"])
        assert run.data.metrics["test_accuracy"] == pytest.approx(trial.value)
        assert trial.user_attrs["mlflow_run_id"] == run.info.run_id

    # The same command again: nothing new. A larger target: only the missing trials, new parameters.
    assert _run(path, tmp_path)[0] == 0
    assert len(optuna.load_study(study_name="resume-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials) == 3
    code, store, study = _run(path, tmp_path, "--n-trials", "5")
    assert code == 0 and len(study.trials) == 5
    lrs = [t.params["lr"] for t in study.trials]
    assert len(set(lrs)) == 5, "a resumed study replayed parameters"
    children, parents = _children(store, "resume", "resume-full")
    assert len(children) == 5 and len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["harness.trials_complete"] == "5"

    capsys.readouterr()
    assert main(["study", str(path), "--status", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    out = capsys.readouterr().out
    assert "5 complete, 0 pruned, 0 failed, 0 running" in out and "best so far" in out
    best = max(study.trials, key=lambda t: t.value)
    assert f"| {best.number} |" in out


def test_a_pruned_trial_is_recorded_as_pruned_not_failed(study_file, tmp_path):
    # A threshold no accuracy reaches: every trial is stopped after its first epoch.
    path = study_file("pruned", space=LR, n_trials=2, base={"epochs": 3, "eval_every_epoch": True},
                      extra='[pruner]\nname = "threshold"\nlower = 1.01\nmetric = "epoch_test_accuracy"\n')
    code, store, study = _run(path, tmp_path)
    assert code == 0
    assert [t.state for t in study.trials] == [TrialState.PRUNED] * 2
    assert all(list(t.intermediate_values) == [0] for t in study.trials)
    children, _ = _children(store, "pruned", "pruned-full")
    assert {r.data.tags[OUTCOME] for r in children} == {"pruned"}
    assert {r.info.status for r in children} == {"FINISHED"}
    run = children[0]
    history = mlflow_client(store).get_metric_history(run.info.run_id, "epoch_test_accuracy")
    assert [m.step for m in history] == [0]  # stopped after one of three epochs
    assert run.data.tags["harness.reason"].startswith("pruned after epoch 1:")  # epochs count from 1


def test_the_engine_counts_the_trials_it_ran_by_their_trial_status(study_file, tmp_path):
    """What became of each trial the engine ran is a TrialStatus (not a string that equals one): the
    outcome's counts are keyed by it, and its summary line prints the plain words."""
    from harness.studies import study_engine
    from harness.specs import study_spec
    from harness.studies.trial_status import TrialStatus

    path = study_file("statuses", space=LR, n_trials=2, base={"epochs": 3, "eval_every_epoch": True},
                      extra='[pruner]\nname = "threshold"\nlower = 1.01\nmetric = "epoch_test_accuracy"\n')
    outcome = study_engine.run_study(study_spec.load(str(path)), Store(f"sqlite:///{tmp_path / 'mlflow.db'}"),
                                     f"sqlite:///{tmp_path / 'optuna.db'}", scale="full", overrides={},
                                     show_progress=False, out_dir=tmp_path, log=lambda line: None)
    assert outcome.states == {TrialStatus.PRUNED: 2}
    assert all(type(state) is TrialStatus for state in outcome.states)
    assert outcome.finished == 2 and outcome.line().startswith("ran 2 trial(s) (2 pruned); stopped: target reached")


def test_multi_objective_study_logs_its_pareto_front(study_file, tmp_path):
    path = study_file("pareto", space=LR + 'sparsity = { type = "float", low = 0.0, high = 0.8 }\n', n_trials=5,
                      metrics=("test_accuracy", "train_time_s"), directions=("maximize", "minimize"),
                      base={"epochs": 1})
    code, store, study = _run(path, tmp_path)
    assert code == 0 and len(study.trials) == 5
    front = {t.number for t in study.best_trials}
    for t in study.trials:  # a trial is on the front exactly when no other dominates it
        dominated = any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1] and o.values != t.values
                        for o in study.trials)
        assert (t.number in front) == (not dominated)
    _, parents = _children(store, "pareto", "pareto-full")
    logged = {a.path for a in mlflow_client(store).list_artifacts(parents[0].info.run_id, "study")}
    assert logged == {"study/pareto-full.md", "study/pareto-full.csv", "study/pareto-full.png",
                      "study/pareto-full-trials.csv"}
    every = pd.read_csv(tmp_path / "reports" / "pareto-full-trials.csv")   # every trial, the front marked
    assert sorted(every["trial"]) == [t.number for t in study.trials]
    assert {int(n) for n in every[every["on_front"]]["trial"]} == front
    table = (tmp_path / "reports" / "pareto-full.md").read_text()
    assert "Pareto front (maximize test_accuracy, minimize train_time_s)" in table
    assert sum(line.startswith("| ") for line in table.splitlines()) == len(front) + 1
    assert parents[0].data.metrics["pareto_size"] == len(front)
    # The experiment's overview shows the front; the parent run says what ran.
    note = mlflow_client(store).get_experiment_by_name("pareto").tags["mlflow.note.content"]
    assert "**Pareto front** (maximize `test_accuracy`, minimize `train_time_s`)" in note
    assert sum(line.startswith("| ") for line in note.splitlines()) == len(front) + 1
    assert f"/runs/{parents[0].info.run_id}/artifacts/study/pareto-full.png" in note
    what = parents[0].data.tags["mlflow.note.content"]
    assert "Study `pareto-full` at scale **full**" in what and "target 5 finished trials" in what
    assert "5 complete" in what and "Machine:" in what
