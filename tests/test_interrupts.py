"""Ctrl-C and SIGTERM to a sweep or a study on this machine (no Slurm), in one process and with
`--workers 2`, and a SIGKILL of a `--workers 2` launcher alone: real processes on a real SQLite
store. Each signal is sent at once to a cell seen under a second after it started, on cells that
take seconds even on an idle machine, so it lands inside the cell; what the store holds afterwards
is checked, then the same command, run again in this process, finishes the job."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import optuna
import psutil
import pytest
from mlflow.entities import ViewType
from optuna.trial import TrialState

from conftest import experiment_runs as runs, harness_command as harness, visible_lines
from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, PARENT, Store
from harness.studies.trial_status import RETRY_OF
from harness.studies.trial_tags import TRIAL

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

# The book's CNN on synthetic data: seconds a cell even on an idle machine.
LONG_CELL = {"model": "cnn", "train_limit": 384, "epochs": 8, "warmup_epochs": 0, "pruning_backend": "torch-pruning"}
FRESH_MS = 1000   # a cell seen this soon after it started has most of its epochs still to run
LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


def new_store(folder) -> str:
    """A SQLite store created before any process starts: MLflow's client polling a store that a
    harness process is still creating would run the schema migrations beside it."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    Store(uri)
    return uri


def cells(found: list) -> list:
    return [r for r in found if PARENT in r.data.tags]


def running_cells(uri: str, experiment: str, proc: subprocess.Popen, at_once: int = 1, seconds: float = 240) -> list:
    """Wait until `at_once` cells (or trials) run together, one of them started under FRESH_MS ago;
    return the running ones, the freshest first."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"it ended ({proc.returncode}) before it could be signalled: "
                        f"{proc.stderr.read()[-2000:] if proc.stderr else ''}")
        running = [r for r in cells(runs(uri, experiment)) if r.info.status == "RUNNING"]
        now_ms = time.time() * 1000
        if len(running) >= at_once and any(now_ms - r.info.start_time < FRESH_MS for r in running):
            return sorted(running, key=lambda r: -r.info.start_time)
        time.sleep(0.1)
    pytest.fail(f"never saw {at_once} cell(s) running, one just started")


def signalled(proc: subprocess.Popen, signum: int, whom: str) -> tuple[str, str]:
    """Send `signum` to the process alone (a scheduler's stop, `kill`) or to its process group
    (Ctrl-C at a terminal reaches every worker too); wait for it to end."""
    (os.killpg if whom == "group" else os.kill)(proc.pid, signum)
    return proc.communicate(timeout=180)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone once every member is
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait()


def assert_interrupted(proc: subprocess.Popen, err: str) -> None:
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert visible_lines(err)[-1].startswith("harness: interrupted"), err[-3000:]


@pytest.mark.parametrize("workers, signum, whom", [(1, signal.SIGTERM, "process"),
                                                   (2, signal.SIGINT, "group")],
                         ids=["sigterm-one-process", "ctrl-c-two-workers"])
def test_a_signal_to_a_local_sweep_closes_the_cell_it_cut_and_the_same_command_finishes(
        workers, signum, whom, sweep_file, tmp_path):
    path = sweep_file("cut", {"sparsity": [0.0, 0.5]}, base=LONG_CELL)
    uri = new_store(tmp_path)
    command = harness("sweep", str(path), "--tracking-uri", uri, *(["--workers", "2"] if workers > 1 else []))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        victim = running_cells(uri, "cut", proc, at_once=workers)[0]
        out, err = signalled(proc, signum, whom)
    finally:
        kill_group(proc)
    assert_interrupted(proc, err)
    everything = runs(uri, "cut", ViewType.ALL)
    assert not [r for r in everything if r.info.status == "RUNNING"]
    cut = next(r for r in everything if r.info.run_id == victim.info.run_id)
    assert (cut.info.status, cut.data.tags[OUTCOME]) == ("KILLED", "interrupted")  # the signal landed in it
    parents = [r for r in everything if PARENT not in r.data.tags]
    assert [(p.info.status, p.data.tags[OUTCOME]) for p in parents] == [("KILLED", "interrupted")]

    assert main(command[3:]) == 0   # the same command, here: a rerun needs no second start-up of torch and MLflow
    assert not [r for r in runs(uri, "cut", ViewType.ALL) if r.info.status == "RUNNING"]
    done = cells(runs(uri, "cut"))
    assert sorted(r.data.tags[CELL_ID] for r in done) == sorted({r.data.tags[CELL_ID] for r in done})
    assert len(done) == 2 and {r.data.tags[OUTCOME] for r in done} == {"ok"}


@pytest.mark.parametrize("workers, signum, whom", [(1, signal.SIGINT, "group"), (2, signal.SIGTERM, "process")],
                         ids=["ctrl-c-one-process", "sigterm-to-the-launcher-of-two-workers"])
def test_a_signal_to_a_local_study_closes_the_trial_it_cut_and_the_same_command_finishes(
        workers, signum, whom, study_file, tmp_path):
    path = study_file("cutstudy", space=LR, n_trials=2, base={k: v for k, v in LONG_CELL.items() if k != "warmup_epochs"})
    uri, url = new_store(tmp_path), f"sqlite:///{tmp_path / 'optuna.db'}"
    command = harness("study", str(path), "--tracking-uri", uri, "--out", str(tmp_path),
                      *(["--workers", "2"] if workers > 1 else []))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        victim = running_cells(uri, "cutstudy", proc, at_once=workers)[0]
        # SIGTERM to the launcher alone: it passes the stop on to its workers (harness/launchers/local.py).
        out, err = signalled(proc, signum, whom)
    finally:
        kill_group(proc)
    assert_interrupted(proc, err)
    everything = runs(uri, "cutstudy", ViewType.ALL)
    assert not [r for r in everything if r.info.status == "RUNNING"]
    cut = next(r for r in everything if r.info.run_id == victim.info.run_id)
    assert (cut.info.status, cut.data.tags[OUTCOME]) == ("KILLED", "interrupted")
    parents = [r for r in everything if PARENT not in r.data.tags]
    assert [(p.info.status, p.data.tags[OUTCOME]) for p in parents] == [("KILLED", "interrupted")]
    # Optuna's side: the cut trial failed, and its parameters are queued to run again.
    trials = optuna.load_study(study_name="cutstudy-full", storage=url).get_trials(deepcopy=False)
    number = int(cut.data.tags[TRIAL])
    assert trials[number].state == TrialState.FAIL
    queued = [t for t in trials if t.user_attrs.get(RETRY_OF) == number]
    # (a queued trial holds the parameters it will run with as Optuna's fixed_params)
    assert [(t.state, t.system_attrs.get("fixed_params")) for t in queued] == \
        [(TrialState.WAITING, trials[number].params)]

    assert main(command[3:]) == 0   # the same command, here: a rerun needs no second start-up of torch and MLflow
    trials = optuna.load_study(study_name="cutstudy-full", storage=url).get_trials(deepcopy=False)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert not [r for r in runs(uri, "cutstudy", ViewType.ALL) if r.info.status == "RUNNING"]
    assert sum(r.data.tags[OUTCOME] == "ok" for r in cells(runs(uri, "cutstudy"))) == 2
    rerun_of_cut = [t for t in trials if t.user_attrs.get(RETRY_OF) == number]
    assert [(t.state, t.params) for t in rerun_of_cut] == [(TrialState.COMPLETE, trials[number].params)]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
    return alive


def test_a_sigkilled_launcher_takes_its_workers_with_it_and_the_same_command_finishes(sweep_file, tmp_path):
    grid = [round(0.1 * i, 1) for i in range(4)]  # two cells beyond the two the workers are seen in
    path = sweep_file("orphans", {"sparsity": grid}, base=LONG_CELL)
    uri = new_store(tmp_path)
    command = harness("sweep", str(path), "--workers", "2", "--tracking-uri", uri)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        running_cells(uri, "orphans", proc, at_once=2)
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the launcher has no worker processes"
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone, as the OOM killer or `kill -9` would
        proc.wait()
        deadline = time.time() + 300
        while _alive(workers) and time.time() < deadline:
            time.sleep(0.5)
        assert not _alive(workers), "the workers still run 300 s after their launcher died"
        finished = [r for r in cells(runs(uri, "orphans", ViewType.ALL)) if r.info.status == "FINISHED"]
        # Two workers seen inside their first cells: ending with their launcher, they finish at most those.
        assert len(finished) < len(grid), "the workers ran the whole grid after their launcher died"
        left = cells(runs(uri, "orphans"))  # and each closed the cell it was in as it ended
        assert left and not [r for r in left if r.info.status == "RUNNING"], "a worker left its cell RUNNING"
        assert {r.data.tags[OUTCOME] for r in left if r.info.status == "KILLED"} <= {"interrupted"}
    finally:
        kill_group(proc)
    ids = [r.data.tags[CELL_ID] for r in finished]
    assert len(ids) == len(set(ids)), "a cell was recorded twice"

    assert main(command[3:]) == 0   # the same command, here: a rerun needs no second start-up of torch and MLflow
    assert not [r for r in runs(uri, "orphans", ViewType.ALL) if r.info.status == "RUNNING"]
    done = cells(runs(uri, "orphans"))
    assert sorted(r.data.tags[CELL_ID] for r in done) == sorted({r.data.tags[CELL_ID] for r in done})
    assert len(done) == len(grid) and {r.data.tags[OUTCOME] for r in done} == {"ok"}
