"""`--launcher slurm` against a real Slurm (`.ci/slurm.sh start`: one node, this machine's cores):
worker jobs share a PostgreSQL claims database and log to a real `mlflow server`; a cancelled
worker's cell goes to the other worker; a cell too big for one node runs as one job of several
srun tasks. Skipped where no Slurm answers (failed under CI)."""

import contextlib
import os
import re
import signal
import subprocess
import time

import optuna
import psycopg
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from conftest import experiment_runs as _runs, harness_command as harness, temporary_database
from test_study_workers import LR, SLOW_TRIAL, serving_mlflow

from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, PARENT, PID

# Each test waits up to 10 minutes on its jobs (a queue, 30-epoch cells): above the global limit.
pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def mlflow_server(postgres_server, tmp_path_factory):
    """One real `mlflow server` for the module, on a PostgreSQL database of its own: each test logs to
    an experiment of its own name, so they need no server each (a start and MLflow's migrations of a
    new database, every time)."""
    with contextlib.contextmanager(temporary_database)(postgres_server, "harness_slurm_mlflow") as backend, \
            serving_mlflow(backend, tmp_path_factory.mktemp("mlflow-server") / "artifacts") as url:
        yield url


@pytest.fixture
def claims_db(postgres_server):
    """A database of its own for the claims and Optuna's tables (the MLflow server has another:
    both keep their migrations in a table named alembic_version)."""
    yield from temporary_database(postgres_server, "harness_slurm")


@pytest.fixture
def slurm_env(tmp_path):
    """The job scripts and logs of this test in its own folder."""
    return {**os.environ, "HARNESS_SLURM_FOLDER": str(tmp_path / "slurm")}


def _claims(url, namespace):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT key, state, pid FROM harness_claims WHERE namespace = %s", (namespace,)).fetchall()


def _job_states(array):
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i %T"],
                         capture_output=True, text=True, check=True)
    return dict(line.split() for line in out.stdout.splitlines())


def _array_id(stdout):
    found = re.search(r"submitted Slurm job (\d+) \((\d+) worker job", stdout)
    assert found, stdout[-2000:]
    return found.group(1), int(found.group(2))


def test_smoke_sweep_with_two_worker_jobs_finishes_every_cell_once(slurm_cluster, claims_db, mlflow_server,
                                                                   sweep_file, slurm_env):
    path = sweep_file("slurm_smoke", {"sparsity": [0.0, 0.2, 0.4, 0.6]},
                      base={"pruning_backend": "torch-pruning", "epochs": 1, "warmup_epochs": 0})
    # With its bars on: the launcher follows the jobs with a bar of cells done and the jobs' states.
    out = subprocess.run(harness("sweep", str(path), "--launcher", "slurm", "--workers", "2", "--storage", claims_db,
                                 "--tracking-uri", mlflow_server, "--slurm-time", "10", bars=True),
                         capture_output=True, text=True, timeout=600, env=slurm_env)
    assert out.returncode == 0, out.stderr[-3000:]
    array, jobs = _array_id(out.stdout)
    assert jobs == 2
    assert "4/4" in out.stderr and "jobs: 0 pending, 0 running, 2 done, 0 failed" in out.stderr, out.stderr[-3000:]
    assert "progress cannot be read" not in out.stderr, out.stderr[-3000:]
    assert "4 cells: 4 ok" in out.stdout
    runs = _runs(mlflow_server, "slurm_smoke")
    cells = [r for r in runs if PARENT in r.data.tags]
    assert sorted(r.data.tags[CELL_ID] for r in cells) == sorted({r.data.tags[CELL_ID] for r in cells})
    assert len(cells) == 4, "a cell ran twice or not at all"
    assert {(r.info.status, r.data.tags[OUTCOME]) for r in cells} == {("FINISHED", "ok")}
    parents = [r for r in runs if PARENT not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["harness.cells_ok"] == "4"
    assert sorted(state for _, state, _ in _claims(claims_db, "sweep:slurm_smoke")) == ["done"] * 4
    assert set(_job_states(array).values()) == {"COMPLETED"}


def test_study_with_two_worker_jobs_finishes_exactly_six_trials(slurm_cluster, claims_db, mlflow_server,
                                                                study_file, slurm_env, tmp_path):
    path = study_file("slurm_study", space=LR, n_trials=6)
    out = subprocess.run(harness("study", str(path), "--launcher", "slurm", "--workers", "2", "--storage", claims_db,
                                 "--tracking-uri", mlflow_server, "--out", str(tmp_path)),
                         capture_output=True, text=True, timeout=600, env=slurm_env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _array_id(out.stdout)[1] == 2
    trials = optuna.load_study(study_name="slurm_study-full", storage=claims_db).get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    children = [r for r in _runs(mlflow_server, "slurm_study") if PARENT in r.data.tags]
    assert len(children) == 6 and {r.data.tags[OUTCOME] for r in children} == {"ok"}


def test_scancel_of_a_worker_job_mid_cell_leaves_the_cell_to_the_other(slurm_cluster, claims_db, mlflow_server,
                                                                        sweep_file, slurm_env):
    # The book's CNN for 30 epochs: several seconds a cell even on an idle machine, so a worker is
    # cancelled well inside the cell it was seen running (with 4 epochs, an idle machine finished
    # the cell between the sighting and the scancel). Two cells, one a worker: the cancelled one's
    # cell is then run by the other once it has finished its own.
    path = sweep_file("slurm_kill", {"sparsity": [0.0, 0.6]},
                      base={**SLOW_TRIAL, "epochs": 30, "pruning_backend": "torch-pruning", "warmup_epochs": 0})
    proc = subprocess.Popen(harness("sweep", str(path), "--launcher", "slurm", "--workers", "2", "--storage", claims_db,
                                    "--tracking-uri", mlflow_server),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_env,
                            start_new_session=True)
    try:
        victim_run, victim_job = _running_cell_and_its_job(mlflow_server, "slurm_kill", proc)
        subprocess.run(["scancel", victim_job], check=True)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # the launcher cancels its jobs
            proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    array, _ = _array_id(out)
    assert _job_states(array)[victim_job] == "CANCELLED"
    assert "2 cells: 2 ok" in out

    everything = _runs(mlflow_server, "slurm_kill", ViewType.ALL)
    assert not [r for r in everything if r.info.status == "RUNNING"]
    killed = next(r for r in everything if r.info.run_id == victim_run.info.run_id)
    assert killed.info.status == "KILLED" and killed.data.tags[OUTCOME] == "interrupted"
    assert killed.info.lifecycle_stage == "deleted"  # one record per cell: the rerun replaced it
    cells = [r for r in _runs(mlflow_server, "slurm_kill") if PARENT in r.data.tags]
    assert len(cells) == 2 and len({r.data.tags[CELL_ID] for r in cells}) == 2
    assert {r.data.tags[OUTCOME] for r in cells} == {"ok"}
    rerun = next(r for r in cells if r.data.tags[CELL_ID] == victim_run.data.tags[CELL_ID])
    assert rerun.data.tags[PID] != victim_run.data.tags[PID]  # the other worker ran it
    assert sorted(state for _, state, _ in _claims(claims_db, "sweep:slurm_kill")) == ["done"] * 2


def test_ctrl_c_cancels_the_jobs_and_the_same_command_finishes_the_sweep(slurm_cluster, claims_db, mlflow_server,
                                                                         sweep_file, slurm_env, monkeypatch, capsys):
    path = sweep_file("slurm_ctrl_c", {"sparsity": [0.0, 0.6]},  # a cell for each worker job
                      base={**SLOW_TRIAL, "pruning_backend": "torch-pruning", "warmup_epochs": 0})
    command = harness("sweep", str(path), "--launcher", "slurm", "--workers", "2", "--storage", claims_db,
                      "--tracking-uri", mlflow_server)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_env,
                            start_new_session=True)
    try:
        _running_cell_and_its_job(mlflow_server, "slurm_ctrl_c", proc)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal: the launcher alone (the jobs run elsewhere)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("harness: interrupted")
    array, _ = _array_id(out)
    assert f"cancelled Slurm job {array}" in out
    states = _wait_until_ended(array)
    assert "CANCELLED" in states.values()
    parent = next(r for r in _runs(mlflow_server, "slurm_ctrl_c") if PARENT not in r.data.tags)
    assert parent.info.status == "KILLED" and parent.data.tags[OUTCOME] == "interrupted"

    # The same command, here: a rerun needs no second start-up of torch and MLflow (its jobs are real).
    monkeypatch.setenv("HARNESS_SLURM_FOLDER", slurm_env["HARNESS_SLURM_FOLDER"])
    capsys.readouterr()
    assert main(command[3:]) == 0, capsys.readouterr().err[-3000:]
    assert not [r for r in _runs(mlflow_server, "slurm_ctrl_c", ViewType.ALL) if r.info.status == "RUNNING"]
    cells = [r for r in _runs(mlflow_server, "slurm_ctrl_c") if PARENT in r.data.tags]
    assert len(cells) == 2 and len({r.data.tags[CELL_ID] for r in cells}) == 2
    assert {r.data.tags[OUTCOME] for r in cells} == {"ok"}


def test_detach_returns_the_job_ids_and_the_workers_close_the_parent_run(slurm_cluster, claims_db, mlflow_server,
                                                                       sweep_file, slurm_env, monkeypatch, capsys):
    from harness.store.tracking import DETACHED_HOST, HOST

    path = sweep_file("slurm_detach", {"sparsity": [0.0, 0.2, 0.4, 0.6]},
                      base={"pruning_backend": "torch-pruning", "epochs": 1, "warmup_epochs": 0})
    command = harness("sweep", str(path), "--launcher", "slurm", "--workers", "2", "--storage", claims_db,
                      "--tracking-uri", mlflow_server, "--detach")
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, env=slurm_env)
    assert out.returncode == 0, out.stderr[-3000:]
    array, _ = _array_id(out.stdout)
    assert "the workers run on" in out.stdout
    assert set(_wait_until_ended(array).values()) == {"COMPLETED"}
    runs = _runs(mlflow_server, "slurm_detach")
    (parent,) = [r for r in runs if PARENT not in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.data.tags["harness.cells_ok"] == "4"
    assert parent.data.tags[HOST] == DETACHED_HOST
    assert sorted(r.data.tags[OUTCOME] for r in runs if PARENT in r.data.tags) == ["ok"] * 4

    monkeypatch.setenv("HARNESS_SLURM_FOLDER", slurm_env["HARNESS_SLURM_FOLDER"])  # the same command, here
    capsys.readouterr()
    code = main(command[3:])
    again = capsys.readouterr()
    assert code == 0 and "4 cells: 4 reused" in again.out, again.err[-3000:]
    assert "submitted" not in again.out  # nothing left to do: no job


def _wait_until_ended(array, seconds=300):
    ended = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"}
    deadline = time.time() + seconds
    while time.time() < deadline:
        states = _job_states(array)
        if states and set(states.values()) <= ended:
            return states
        time.sleep(1)
    pytest.fail(f"Slurm job {array} still runs: {_job_states(array)}")


def _running_cell_and_its_job(server, experiment, proc, seconds=300):
    """A cell run that has been running for a second, and the array task (A_T) of its worker."""
    client = MlflowClient(server)
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        exp = client.get_experiment_by_name(experiment)
        running = [r for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
                   if PARENT in r.data.tags] if exp else []
        for run in running:
            if time.time() * 1000 - run.info.start_time > 1000:
                env = dict(line.split("=", 1) for line in
                           open(f"/proc/{run.data.tags[PID]}/environ").read().split("\0") if "=" in line)
                return run, f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        time.sleep(0.3)
    pytest.fail("no cell was seen running")


def test_an_unknown_partition_is_refused_before_anything_is_submitted(slurm_cluster, sweep_file, capsys):
    from conftest import assert_one_sentence_exit_2

    path = sweep_file("slurm_refused", {"sparsity": [0.0]})
    before = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert_one_sentence_exit_2(["sweep", str(path), "--launcher", "slurm", "--slurm-partition", "no_such_partition",
                                "--storage", "postgresql://u:secret@127.0.0.1:1/db", "--tracking-uri",
                                "http://127.0.0.1:1"],
                               ["no partition 'no_such_partition'", slurm_cluster[0]], capsys)
    after = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert set(after) <= set(before)  # nothing submitted


def test_a_cell_with_more_ranks_than_a_node_holds_runs_as_one_job_of_two_srun_tasks(slurm_cluster, tmp_path,
                                                                                   monkeypatch):
    """Two ranks where a node holds one (as the launcher tells a worker): one Slurm job of two
    tasks, torchrun on each with the rendezvous on the first; the result comes back as from one node.
    On this one-node cluster both tasks share the machine; two real nodes are not tested here."""
    from experiments import make_config
    from harness.distributed.launch import launch
    from harness.distributed.slurm_span import SPAN_ENV, Span

    shared = tmp_path / "cells"
    monkeypatch.setenv(SPAN_ENV, Span(node_cpus=1, node_gpus=0, partition=None, time_min=10,
                                      shared_dir=str(shared)).encode())
    cfg = make_config({"experiment": "data_parallel", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 256,
                       "test_limit": 128, "epochs": 1, "warmup_epochs": 0, "batch_size": 32, "world_size": 2,
                       "threads": 1, "backend": "gloo", "device": "cpu", "dist_timeout_s": 120})
    result = launch(cfg, "harness.distributed.ddp_train:train", keep_workdir=True)
    assert result["ranks"] == 2 and result["ranks_params_identical"] == 1.0
    (workdir,) = shared.glob("harness-ddp-*")
    assert {p.name for p in workdir.glob("started-node*")} == {"started-node0", "started-node1"}
    assert {p.name for p in workdir.glob("result-node*")} == {"result-node0.json", "result-node1.json"}
