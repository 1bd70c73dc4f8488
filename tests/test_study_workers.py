"""Several worker processes on one study or one grid, and a study killed mid-trial then resumed:
real processes, real SQLite and PostgreSQL databases, a real `mlflow server`."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from conftest import free_port, harness_command as harness, launched_here
from harness.studies.trial_status import RETRY_OF
from harness.studies.trial_tags import STUDY
from harness.store.tracking import OUTCOME, PARENT
from harness.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'
# The book's CNN on synthetic data: seconds a trial even on an idle machine, so a trial seen within
# FRESH_S of its cell's first sighting is killed inside it (4 epochs took under a second idle).
SLOW_TRIAL = {"model": "cnn", "train_limit": 384, "epochs": 10}
FRESH_S = 1.0


class TrialWatch:
    """Polls one study and tells which running trials are fresh: their cell was first seen under
    FRESH_S ago, so most of their epochs are still to run.

    The clock starts at this watch's own first sighting of the trial's cell id, not at Optuna's
    datetime_start: a trial is RUNNING from `study.ask()`, and on a loaded host the owner attribute,
    the sampling and the baseline lookup before the cell id (each a database round trip) took more
    than FRESH_S, so a start-based window could close before the trial was ever seen with its cell
    (a kill before the cell id leaves nothing to requeue). The study is loaded once: a fresh
    `load_study` per poll opens a new database engine, slow enough under load to miss the window."""

    def __init__(self, name: str, url: str):
        self.name, self.url = name, url
        self._study = None
        self._first_seen: dict[int, float] = {}

    def trials(self) -> list:
        if self._study is None:
            try:
                self._study = optuna.load_study(study_name=self.name, storage=self.url)
            except KeyError:  # not created yet
                return []
        now = time.monotonic()
        trials = self._study.get_trials(deepcopy=False)
        for t in trials:
            if t.state == TrialState.RUNNING and "cell_id" in t.user_attrs and t.params:
                self._first_seen.setdefault(t.number, now)
        return trials

    def fresh(self, trial) -> bool:
        seen = self._first_seen.get(trial.number)
        return trial.state == TrialState.RUNNING and seen is not None and time.monotonic() - seen < FRESH_S


def _trials(name, url):
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


def _children(uri, experiment, study_name):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], f"tags.`{STUDY}` = '{study_name}'")
    return [r for r in runs if PARENT in r.data.tags]


def _wait_for_running_after_complete(name, url, proc, seconds=150):
    """The number of a trial whose cell was first seen under FRESH_S ago, once another has finished."""
    watch = TrialWatch(name, url)
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert proc.poll() is None, "the study ended before it could be killed"
        trials = watch.trials()
        if any(t.state == TrialState.COMPLETE for t in trials) and watch.fresh(trials[-1]):
            return trials[-1].number
        time.sleep(0.1)
    pytest.fail("never saw a trial start after one had finished")


def _assert_unique_params(trials):
    finished = [t for t in trials if t.state == TrialState.COMPLETE]
    keys = [tuple(sorted(t.params.items())) for t in finished]
    assert len(keys) == len(set(keys)), "a parameter set ran twice"


def test_killed_mid_trial_then_rerun_reaches_the_target_without_replaying(study_file, tmp_path, capsys):
    path = study_file("killed", space=LR, n_trials=3, base=SLOW_TRIAL)
    uri, url = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    command = harness("study", str(path), "--tracking-uri", uri)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        killed = _wait_for_running_after_complete("killed-full", url, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # at once: the trial's cell was first seen under FRESH_S ago
        proc.wait()
    assert _trials("killed-full", url)[killed].state == TrialState.RUNNING, "the kill came after the trial ended"
    before = {t.number: t.params for t in _trials("killed-full", url) if t.state == TrialState.COMPLETE}
    # The status and the rerun are the same commands run here: no second start-up of torch and MLflow.
    capsys.readouterr()
    assert main([*command[3:], "--status"]) == 0
    status = capsys.readouterr().out
    assert "0 running, 1 interrupted (process gone)" in status, status  # not "1 running"
    assert f"trial {killed} (process {proc.pid} on" in status

    assert main(command[3:]) == 0
    rerun = capsys.readouterr().out
    requeued = next(t.number for t in _trials("killed-full", url) if t.user_attrs.get(RETRY_OF) == killed)
    assert f"trial {killed} was interrupted (its process {proc.pid} on" in rerun, rerun
    assert f"requeued as trial {requeued}" in rerun
    assert f"trial {requeued} runs again the parameters of trial {killed}, which was interrupted" in rerun
    parent = next(r for r in MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("killed").experiment_id], f"tags.`{STUDY}` = 'killed-full'")
        if PARENT not in r.data.tags)
    assert parent.data.tags[OUTCOME] == "ok" and "harness.reason" not in parent.data.tags  # no "killed or crashed"
    trials = _trials("killed-full", url)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert trials[killed].state == TrialState.FAIL
    retried = [t for t in trials if t.user_attrs.get(RETRY_OF) == killed]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == trials[killed].params  # the killed trial is rerun with its parameters
    for number, params in before.items():  # finished trials kept
        assert trials[number].params == params and trials[number].state == TrialState.COMPLETE
    _assert_unique_params(trials)  # and the sampler moved on instead of replaying the first run
    runs = _children(uri, "killed", "killed-full")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    outcomes = sorted(r.data.tags[OUTCOME] for r in runs)
    # The killed trial's run is closed as interrupted (absent if the kill came before it was created).
    assert outcomes in (["interrupted", "ok", "ok", "ok"], ["ok", "ok", "ok"])


def _grid_sweep(sweep_file):
    return sweep_file("shared", {"sparsity": [0.0, 0.3, 0.6], "lr": [0.01, 0.02]},
                      base={"pruning_backend": "torch-pruning", "epochs": 1})


def _check_grid(uri, cells=6):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("shared")
    runs = [r for r in client.search_runs([exp.experiment_id], "") if PARENT in r.data.tags]
    ids = [r.data.tags["harness.cell_id"] for r in runs]
    assert len(ids) == cells and len(set(ids)) == cells, "a cell ran twice or not at all"
    assert {r.data.tags[OUTCOME] for r in runs} == {"ok"}
    return runs


def test_two_workers_on_one_sqlite_file_study_and_grid(study_file, sweep_file, tmp_path, capfd):
    path = study_file("pair", space=LR + 'sparsity = { type = "float", low = 0.0, high = 0.8 }\n', n_trials=4)
    uri, url = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    code, err = launched_here(capfd, "study", str(path), "--workers", "2", "--tracking-uri", uri)
    assert code == 0, err[-2000:]
    assert "locked" not in err
    trials = _trials("pair-full", url)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    _assert_unique_params(trials)
    assert len({t.user_attrs["harness.owner"].split("|")[1] for t in trials}) == 2  # both workers ran trials
    assert len(_children(uri, "pair", "pair-full")) == 4

    code, err = launched_here(capfd, "sweep", str(_grid_sweep(sweep_file)), "--workers", "2", "--tracking-uri", uri)
    assert code == 0, err[-2000:]
    assert "locked" not in err
    _check_grid(uri)


def test_two_machines_share_a_postgresql_study_and_one_dies(postgres_db, study_file, sweep_file, tmp_path, capfd):
    """Two independent workers (as on two machines) on one PostgreSQL study; one is SIGKILLed
    mid-trial; the other finishes: exactly the target, nothing RUNNING, the lost trial rerun."""
    path = study_file("pg", space=LR, n_trials=4, base=SLOW_TRIAL)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = harness("study", str(path), "--storage", postgres_db, "--tracking-uri", uri)
    # Either worker may be the one that dies: on a loaded host one worker can take three trials
    # while the other is still on its first, so waiting for a particular one can wait forever.
    # Output goes to files: a pipe nobody reads could stall a worker.
    logs = [tmp_path / f"worker-{i}.err" for i in (0, 1)]
    sinks = [open(log, "w") for log in logs]
    workers = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
               for sink in sinks]
    try:
        watch = TrialWatch("pg-full", postgres_db)
        by_pid = {str(w.pid): w for w in workers}
        deadline = time.time() + 150
        victim = dying = None
        while time.time() < deadline and victim is None:
            trials = watch.trials()
            done = any(t.state == TrialState.COMPLETE for t in trials)
            victim, dying = next(((t.number, by_pid[pid]) for t in trials if done and watch.fresh(t) and
                                  (pid := t.user_attrs.get("harness.owner", "||").split("|")[1]) in by_pid),
                                 (None, None))
            if victim is None:
                time.sleep(0.1)
        assert victim is not None, "no worker started a trial after one had finished"
        os.killpg(dying.pid, signal.SIGKILL)  # at once, within FRESH_S of the cell's first sighting
        dying.wait()
        # Still running (or already failed by the other worker, which saw its owner die), never complete.
        assert _trials("pg-full", postgres_db)[victim].state in (TrialState.RUNNING, TrialState.FAIL), \
            "the kill came after the trial ended"
        second = next(w for w in workers if w is not dying)
        second.wait(timeout=300)
        err = logs[workers.index(second)].read_text()
    finally:
        for proc in workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for sink in sinks:
            sink.close()
    assert second.returncode == 0, err[-2000:]
    trials = _trials("pg-full", postgres_db)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 4
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert trials[victim].state == TrialState.FAIL
    assert any(t.user_attrs.get(RETRY_OF) == victim and t.state == TrialState.COMPLETE for t in trials)
    _assert_unique_params(trials)
    runs = _children(uri, "pg", "pg-full")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert sum(r.data.tags[OUTCOME] == "ok" for r in runs) == 4

    # A grid over the same database with two workers: every cell once.
    code, err = launched_here(capfd, "sweep", str(_grid_sweep(sweep_file)), "--workers", "2", "--storage", postgres_db,
                              "--tracking-uri", uri)
    assert code == 0, err[-2000:]
    runs = _check_grid(uri)
    assert len({r.data.tags["harness.pid"] for r in runs}) == 2  # both workers took cells


@pytest.fixture
def mlflow_server(tmp_path, request):
    """A real `mlflow server` on 127.0.0.1 with a database backend: PostgreSQL when there is one,
    else SQLite."""
    try:
        backend = request.getfixturevalue("postgres_db")
    except pytest.skip.Exception:
        backend = f"sqlite:///{tmp_path / 'server.db'}"
    with serving_mlflow(backend, tmp_path / "artifacts") as url:
        yield url


@contextlib.contextmanager
def serving_mlflow(backend: str, artifacts: Path):
    """A real `mlflow server` on 127.0.0.1 over `backend`, its artifacts in `artifacts`; yields its URL.
    Its log goes to a file beside them: a pipe nobody reads would stall a server that serves many tests."""
    port = free_port()
    log = artifacts.with_name("mlflow-server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
                                 "--artifacts-destination", str(artifacts), "--host", "127.0.0.1",
                                 "--port", str(port), "--workers", "1"],
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        import requests

        deadline = time.time() + 120
        while True:
            try:
                if requests.get(url + "/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"mlflow server did not start: {log.read_text()[-2000:] if proc.poll() is not None else 'timeout'}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_two_workers_log_to_a_real_mlflow_server(mlflow_server, study_file, tmp_path, capfd):
    path = study_file("served", space=LR, n_trials=4)
    code, err = launched_here(capfd, "study", str(path), "--workers", "2", "--tracking-uri", mlflow_server,
                              "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--out", str(tmp_path))
    assert code == 0, err[-2000:]
    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("served")
    runs = client.search_runs([exp.experiment_id], "")
    parents = [r for r in runs if PARENT not in r.data.tags]
    children = [r for r in runs if PARENT in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    assert {r.data.tags[PARENT] for r in children} == {parents[0].info.run_id}
    assert len({r.data.tags["harness.pid"] for r in children}) == 2  # logged by both workers
    assert all("lr" in r.data.params and "test_accuracy" in r.data.metrics for r in children)
    assert {a.path for a in client.list_artifacts(parents[0].info.run_id, "study")} >= {"study/served-full.png"}
