"""A study trial cut off by Ctrl-C (or a kill) is interrupted, not failed: the live output and
`--status` say which trial runs its parameters again, a requeued trial is not "1 waiting", and the
trial numbers the study then skips are explained. In one process, on real SQLite stores."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from harness.cli import main
from harness.store.tracking import Store
from harness.studies import trial_steps

LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


def _study(path, folder, capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["study", str(path), "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}", "--no-progress",
                 "--out", str(folder / "reports"), *args])
    return code, capsys.readouterr().out


def test_a_ctrl_c_trial_is_interrupted_and_requeued_never_failed(study_file, tmp_path, capsys, monkeypatch):
    path = study_file("cut", space=LR, n_trials=2, base={"epochs": 1})
    real_run_cell, calls = trial_steps.run_cell, []

    def ctrl_c_in_the_second_trial(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run_cell(*args, **kwargs)

    monkeypatch.setattr(trial_steps, "run_cell", ctrl_c_in_the_second_trial)
    code, live = _study(path, tmp_path, capsys)
    assert code == 130
    assert "  trial 1 interrupted, requeued as trial 2" in live.splitlines(), live

    code, status = _study(path, tmp_path, capsys, "--status")
    first, *rest = status.splitlines()
    assert code == 0
    assert first == "study cut-full: 1 complete, 0 pruned, 0 failed, 1 interrupted, 0 running, 0 waiting, 1 requeued"
    assert "  trial 1 interrupted, requeued as trial 2 (waits to run: the same command resumes the study)" in rest

    monkeypatch.setattr(trial_steps, "run_cell", real_run_cell)
    code, resumed = _study(path, tmp_path, capsys)
    assert code == 0
    assert "  trial 2 runs again the parameters of trial 1, which was interrupted" in resumed
    code, status = _study(path, tmp_path, capsys, "--status")
    first, *rest = status.splitlines()
    assert first == "study cut-full: 2 complete, 0 pruned, 0 failed, 1 interrupted, 0 running, 0 waiting"
    # The best table lists trials 0 and 2: the line says where 1 went.
    assert "  trial 1 interrupted, requeued as trial 2 (complete)" in rest
    study = optuna.load_study(study_name="cut-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    # The study's MLflow parent run counts it the same way.
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = next(r for r in store.runs(store.find_experiment("cut")) if "harness.trials_complete" in r.tags)
    assert (parent.tags["harness.trials_fail"], parent.tags["harness.trials_interrupted"]) == ("0", "1")


def test_status_reads_the_study_without_opening_or_making_the_mlflow_store(study_file, tmp_path, capsys):
    path = study_file("looked", space=LR, n_trials=1, base={"epochs": 1})
    assert _study(path, tmp_path, capsys)[0] == 0
    (tmp_path / "mlflow.db").rename(tmp_path / "elsewhere.db")
    code, status = _study(path, tmp_path, capsys, "--status", "--storage", f"sqlite:///{tmp_path / 'optuna.db'}")
    assert code == 0 and status.startswith("study looked-full: 1 complete"), status
    assert not (tmp_path / "mlflow.db").exists()
