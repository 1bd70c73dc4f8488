"""`--launcher slurm` without a cluster: what is refused before anything is submitted, the pieces
of the commands it builds, and a worker that takes over the cell of a sibling that died (the
engine side of a cancelled worker job). The real cluster is in test_slurm.py."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_one_sentence_exit_2, mlflow_client

from experiments import make_config
from harness.distributed.launch import torchrun_command
from harness.distributed.slurm_span import Span, nodes_needed, srun_command, srun_env
from harness.errors import UserError
from harness.launchers import WorkerRole
from harness.launchers.slurm import NodeShape, SlurmLauncher, minutes, node_shape

PG = "postgresql://u:secret@127.0.0.1:1/db"   # never reached: the refusals come first
SERVER = "http://127.0.0.1:1"


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch and sinfo stand-ins first on PATH: sbatch records that it was called (it must not
    be), sinfo answers one partition 'debug' of 2-CPU nodes without GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path / 'submitted'}\n")
    (bin_dir / "sinfo").write_text('#!/bin/sh\ncase "$*" in *%P*) echo "debug*";; *) echo "2|(null)";; esac\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "submitted"


@pytest.mark.parametrize("extra, words", [
    (["--storage", f"sqlite:///{'{tmp}'}/claims.db", "--tracking-uri", SERVER], ["SQLite", "--storage postgresql://"]),
    (["--tracking-uri", SERVER], ["SQLite", "--storage postgresql://"]),   # the default claims database
    (["--storage", PG, "--tracking-uri", "sqlite:///{tmp}/mlflow.db"], ["local file", "--tracking-uri http://"]),
    (["--storage", PG, "--tracking-uri", SERVER, "--slurm-partition", "gpu"], ["no partition 'gpu'", "debug"]),
    (["--storage", PG, "--tracking-uri", SERVER, "--slurm-time", "an hour"], ["--slurm-time", "Slurm time"]),
    (["--storage", PG, "--tracking-uri", SERVER, "--slurm-gpus-per-task", "1"], ["1 is more than the 0 GPU"]),
    (["--storage", PG, "--tracking-uri", SERVER, "--slurm-cpus-per-task", "3"], ["3 is more than the 2 CPU"]),
])
def test_what_slurm_cannot_serve_is_one_sentence_before_anything_is_submitted(extra, words, fake_slurm, sweep_file,
                                                                              tmp_path, capsys):
    path = sweep_file("refused", {"sparsity": [0.0]})
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert_one_sentence_exit_2(["sweep", str(path), "--launcher", "slurm", "--workers", "2", *extra], words, capsys)
    assert not fake_slurm.exists(), "sbatch was called"
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "claims.db").exists()


def test_no_sbatch_on_path_is_one_sentence(sweep_file, study_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    args = ["--launcher", "slurm", "--storage", PG, "--tracking-uri", SERVER]
    sweep = sweep_file("nosb", {"sparsity": [0.0]})
    study = study_file("nosb", space='lr = { type = "float", low = 0.001, high = 0.1 }')
    assert_one_sentence_exit_2(["sweep", str(sweep), *args], ["sbatch", "PATH"], capsys)
    assert_one_sentence_exit_2(["study", str(study), *args], ["sbatch", "PATH"], capsys)


@pytest.mark.parametrize("option", [["--slurm-partition", "gpu"], ["--detach"], ["--slurm-time", "10"]])
def test_slurm_options_without_the_slurm_launcher_are_refused(option, sweep_file, capsys):
    path = sweep_file("opts", {"sparsity": [0.0]})
    assert_one_sentence_exit_2(["sweep", str(path), *option], [option[0], "needs --launcher slurm"], capsys)


@pytest.mark.parametrize("text, expected", [("10", 10), ("90:30", 91), ("1:00:00", 60), ("2-0", 2880),
                                            ("1-02:03", 1563), ("0-0:0:59", 1)])
def test_slurm_times_become_whole_minutes(text, expected):
    assert minutes(text) == expected


@pytest.mark.parametrize("text", ["", "0", "1h", "1:2:3:4", "-5"])
def test_a_bad_slurm_time_is_refused(text):
    with pytest.raises(UserError):
        minutes(text)


def test_a_partition_is_as_big_as_its_smallest_node(tmp_path, monkeypatch):
    (tmp_path / "sinfo").write_text('#!/bin/sh\nprintf "64|gpu:a100:8(S:0-1)\\n32+|gpu:4,shard:8\\n"\n')
    (tmp_path / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert node_shape("gpu") == NodeShape(cpus=32, gpus=4)


def test_the_job_array_asks_for_what_the_options_say():
    launcher = SlurmLauncher(partition="gpu", time="2:00:00", gpus_per_task=1, cpus_per_task=8)
    params = launcher.sbatch_parameters([sys.executable, "-m", "harness", "sweep", "/x/sweeps/sparsity.toml"])
    assert params == {"job_name": "harness-sweep-sparsity", "time": 120, "cpus_per_task": 8, "ntasks_per_node": 1,
                      "signal_delay_s": 60, "partition": "gpu", "gpus_per_task": 1}
    assert launcher.cores_per_worker(4) == 8  # each worker's torch threads: its job's cores


def test_worker_roles_round_trip_and_read_the_old_three_fields():
    role = WorkerRole(3, "tok", "parent", closes_parent=True)
    assert WorkerRole.decode(role.encode()) == role
    assert WorkerRole.decode("1:tok:parent") == WorkerRole(1, "tok", "parent", False)


# --- a cell too big for one node ------------------------------------------------------------------
SPAN = Span(node_cpus=8, node_gpus=4, partition="gpu", time_min=30, shared_dir="/shared/cells")


def _cfg(**values):
    return make_config({"experiment": "data_parallel", "backend": "gloo", **values})


@pytest.mark.parametrize("values, nodes", [
    ({"world_size": 16, "device": "cuda", "backend": "nccl"}, 4),    # 4 GPUs a node
    ({"world_size": 6, "threads": 2, "device": "cpu"}, 2),           # 8 cores hold 4 ranks of 2 threads: 3 + 3
    ({"world_size": 4, "threads": 2, "device": "cpu"}, 1),           # fits one node
    ({"world_size": 1, "threads": 16, "device": "cpu"}, 1),          # one process: placement decides
    ({"world_size": 8, "nnodes": 2, "rdzv_endpoint": "h:1", "device": "cpu", "threads": 1}, 1),  # placed by hand
])
def test_a_cell_is_spread_over_the_fewest_nodes_that_hold_it_evenly(values, nodes):
    assert nodes_needed(_cfg(**values), SPAN) == nodes
    assert nodes_needed(_cfg(**values), None) == 1  # not a Slurm worker: never spread


def test_the_cell_job_asks_each_task_for_one_nodes_share():
    cfg = _cfg(world_size=16, device="cuda", backend="nccl", threads=2)
    command = srun_command(cfg, SPAN, 4, Path("/shared/cells/w/config.json"), Path("/shared/cells/w"), "m:f")
    assert command[:1] == ["srun"]
    for flag in ("--ntasks=4", "--cpus-per-task=8", "--gpus-per-task=4", "--partition=gpu", "--time=30",
                 "--kill-on-bad-exit=1"):
        assert flag in command
    assert command[-5:] == ["-m", "harness.distributed.slurm_task", "/shared/cells/w/config.json", "/shared/cells/w",
                            "m:f"]


def test_srun_in_a_worker_job_asks_for_a_new_job():
    env = srun_env({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin"})
    assert env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin"}


def test_each_node_is_told_whether_it_hosts_the_rendezvous():
    cfg = _cfg(world_size=4, nnodes=2, node_rank=1, rdzv_endpoint="node1:29407", device="cpu", threads=1)
    command = torchrun_command(cfg, Path("c.json"), Path("w"), "m:f", is_host=False)
    assert "--rdzv-conf=join_timeout=300,is_host=0" in command and "--node-rank=1" in command
    assert "--rdzv-conf=join_timeout=300" in torchrun_command(cfg, Path("c.json"), Path("w"), "m:f")


def test_each_task_of_the_cell_job_runs_torchrun_as_its_node(tmp_path, monkeypatch):
    """The module srun_command names (`python -m harness.distributed.slurm_task`): task SLURM_PROCID
    of SLURM_NTASKS becomes torchrun's node of that rank, with the rendezvous on the job's first host."""
    from harness.distributed import slurm_task
    from harness.distributed.slurm_span import PORT_BASE

    command = srun_command(_cfg(world_size=4, device="cpu", threads=1), SPAN, 2, tmp_path / "config.json", tmp_path,
                           "m:f")
    module = command[command.index("-m") + 1]
    assert module == slurm_task.__name__ and importlib.util.find_spec(module) is not None
    assert 'if __name__ == "__main__":' in Path(slurm_task.__file__).read_text()
    assert slurm_task.main([]) == 2  # not started by srun: a usage line, no traceback
    from harness.fields.config import CLASS_ENV, class_name

    cfg = _cfg(world_size=4, device="cpu", threads=1)
    (tmp_path / "config.json").write_text(cfg.model_dump_json())
    monkeypatch.setenv(CLASS_ENV, class_name(cfg))   # what launch() puts in srun's environment
    for name, value in {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]",
                        "SLURM_JOB_ID": "5007"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(slurm_task, "first_host", lambda nodelist: "n1")  # scontrol's answer for n[1-2]
    started = {}
    monkeypatch.setattr(slurm_task.os, "execve", lambda path, argv, env: started.update(argv=argv, env=env))
    slurm_task.main([str(tmp_path / "config.json"), str(tmp_path), "m:f"])
    argv = started["argv"]
    assert "--nnodes=2" in argv and "--node-rank=1" in argv and "--nproc-per-node=2" in argv
    assert f"--rdzv-endpoint=n1:{PORT_BASE + 7}" in argv and any(a.endswith("is_host=0") for a in argv)
    assert (tmp_path / "started-node1").exists() and started["env"]["OMP_NUM_THREADS"] == "1"
    assert json.loads((tmp_path / "config-node1.json").read_text())["node_rank"] == 1


# --- a dead sibling's cell ------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_a_worker_takes_over_the_cell_of_a_sibling_that_dies(sweep_file, tmp_path):
    """Worker 0 finds cell B held by a live worker of its invocation, waits, and when that worker
    dies (a cancelled job) runs B itself; the dead worker's RUNNING run is closed as interrupted."""
    from harness.store import Claims, Store
    from harness.store.tracking import CELL_ID, OUTCOME, PARENT, SWEEP
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep
    from harness.specs.sweep_spec import expand

    path = sweep_file("sibling", {"sparsity": [0.0, 0.5]}, base={"pruning_backend": "torch-pruning"})
    spec = sweep_spec.load(str(path))
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    url = f"sqlite:///{tmp_path / 'claims.db'}"
    cells = expand(spec, "smoke", {})
    experiment_id = store.experiment_id("sibling")
    parent = store.start_run(experiment_id, "sibling (smoke)", {SWEEP: "sibling"})
    launcher_claims = Claims(url)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(4)"])
    threading.Thread(target=sibling.wait, daemon=True).start()  # reaped when it ends: no zombie looks alive
    try:
        # The sibling (same invocation token) holds cell B and has a run open in it.
        held = Claims(url, token=launcher_claims.token)
        held.claim(f"sweep:{spec.name}", cells[1].cell_id, note=cells[1].label)
        with held.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE harness_claims SET pid = ?, pid_start = ?",
                                 (sibling.pid, psutil.Process(sibling.pid).create_time()))
        orphan = store.start_run(experiment_id, cells[1].label, {SWEEP: "sibling", CELL_ID: cells[1].cell_id}, parent)
        started = time.time()
        lines = []
        result = run_sweep(spec, store, scale="smoke", db_url=url, role=WorkerRole(0, launcher_claims.token, parent),
                           show_progress=False, log=lines.append)
    finally:
        sibling.kill()
        held.close()
        launcher_claims.close()
    assert time.time() - started >= 2  # it waited for the live sibling first
    assert [str(r.outcome) for r in result.results] == ["ok", "ok"]
    assert any("taken over from a dead worker" in line for line in lines), lines
    client = mlflow_client(store)
    dead = client.get_run(orphan)
    assert dead.info.status == "KILLED" and dead.data.tags[OUTCOME] == "interrupted"
    live = [r for r in client.search_runs([experiment_id], "") if PARENT in r.data.tags]
    assert sorted(r.data.tags[CELL_ID] for r in live) == sorted(c.cell_id for c in cells)
    assert {r.data.tags[OUTCOME] for r in live} == {"ok"}


@pytest.mark.multiprocess
def test_a_study_worker_takes_over_the_trial_slot_of_a_sibling_that_dies(study_file, tmp_path):
    """Worker 0 runs the free slot, waits while a live sibling of its invocation holds the other,
    and when the sibling dies fails its trial, closes that trial's MLflow run as interrupted and
    runs its parameters again: exactly the target, nothing RUNNING."""
    import optuna
    from optuna.trial import TrialState

    from harness.store import Claims, Store
    from harness.store.tracking import OUTCOME
    from harness.studies import liveness, study_engine, study_parent, study_storage, trial_loop, trial_status, trial_tags
    from harness.specs import study_spec

    spec = study_spec.load(str(study_file("sib", space='lr = { type = "float", low = 0.001, high = 0.1, log = true }\n',
                                         n_trials=2)))
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    url = f"sqlite:///{tmp_path / 'claims.db'}"
    name = spec.study_name("full", {})
    study = study_storage.open_study(spec, name, url, create=True)
    experiment_id = store.experiment_id(spec.name)
    parent = study_parent.parent_run(store, experiment_id, name, "full", {})
    token_holder = Claims(url)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    threading.Thread(target=sibling.wait, daemon=True).start()
    held = Claims(url, token=token_holder.token)
    try:
        held.claim(f"study:{name}", "slot-00001")
        with held.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE harness_claims SET pid = ?, pid_start = ?",
                                 (sibling.pid, psutil.Process(sibling.pid).create_time()))
        orphan = study.ask()
        orphan.suggest_float("lr", 0.001, 0.1, log=True)
        orphan.set_user_attr(liveness.OWNER_ATTR, f"{held.host}|{sibling.pid}|0|{held.owner}")
        orphan_run = store.start_run(experiment_id, "orphan",
                                     {trial_tags.STUDY: name, trial_tags.TRIAL: str(orphan.number)}, parent)
        role = WorkerRole(0, token_holder.token, parent)
        outcome = study_engine.run_study(spec, store, url, scale="full", overrides={}, role=role, show_progress=False,
                                   log=lambda line: None)
    finally:
        sibling.kill()
        held.close()
        token_holder.close()
    assert outcome.stop is trial_loop.StopReason.TARGET_REACHED and outcome.ran == 2
    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    assert trials[orphan.number].state == TrialState.FAIL
    retried = [t for t in trials if t.user_attrs.get(trial_status.RETRY_OF) == orphan.number]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == trials[orphan.number].params
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2
    closed = mlflow_client(store).get_run(orphan_run)
    assert closed.info.status == "KILLED" and closed.data.tags[OUTCOME] == "interrupted"


class _WorkersThatNeverStart:
    """A launcher whose workers all fail before taking a cell (jobs that could not start on their nodes)."""
    detach = False

    def cores_per_worker(self, workers):
        return 1

    def run(self, commands, envs, progress=None):
        assert len(commands) == 2 and all("--worker" in c for c in commands)
        return [1, 1]


def test_cells_no_worker_ran_say_that_the_workers_failed(sweep_file, tmp_path):
    from harness.store import Outcome, Store
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    spec = sweep_spec.load(str(sweep_file("nostart", {"sparsity": [0.0, 0.5]})))
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = run_sweep(spec, store, scale="smoke", db_url=f"sqlite:///{tmp_path / 'claims.db'}", workers=2,
                       launcher=_WorkersThatNeverStart(), show_progress=False)
    assert [r.outcome for r in result.results] == [Outcome.NOT_RUN, Outcome.NOT_RUN]
    assert all("2 of 2 worker(s) exited with an error" in r.reason for r in result.results)


# --- following the jobs: the bar, with squeue a stand-in ---------------------------------------------
def _fake_squeue(tmp_path, monkeypatch, answers: list[str]) -> None:
    """`squeue` first on PATH, running the shell lines answers[i] at its i-th call (the last from then
    on): a `_listing(...)`, or `echo refused >&2; exit 1` for a squeue that does not answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for i, answer in enumerate(answers):
        (tmp_path / f"squeue-{i}").write_text(answer + "\n")
    calls = tmp_path / "squeue-calls"
    script = (f'#!/bin/sh\necho . >> "{calls}"\nn=$(($(wc -l < "{calls}") - 1))\n'
              f'[ "$n" -ge {len(answers)} ] && n={len(answers) - 1}\n. "{tmp_path}/squeue-$n"\n')
    (bin_dir / "squeue").write_text(script)
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _listing(*lines: str) -> str:
    """The shell line by which the stand-in squeue lists jobs, one `JOBID|STATE` a line."""
    return "printf '" + "".join(f"{line}\\n" for line in lines) + "'"


def _jobs(tmp_path, array: str, count: int) -> list:
    """Stand-ins for submitit's jobs that each wrote a result (exit code 0)."""
    from types import SimpleNamespace

    jobs = []
    for i in range(count):
        result = tmp_path / f"{array}_{i}_result.pkl"
        result.write_bytes(b"")
        jobs.append(SimpleNamespace(job_id=f"{array}_{i}", paths=SimpleNamespace(result_pickle=result),
                                    result=lambda: 0))
    return jobs


def test_the_slurm_follow_bar_shows_done_of_total_and_the_jobs_states(tmp_path, monkeypatch, capsys):
    from harness.launchers import slurm

    _fake_squeue(tmp_path, monkeypatch, [_listing("7_0|RUNNING", "7_1|PENDING"), _listing("7_0|RUNNING", "7_1|RUNNING"),
                                         _listing("7_0|COMPLETED", "7_1|COMPLETED")])
    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    readings = iter([(0, 4), (2, 4)])
    codes = SlurmLauncher(folder=tmp_path)._follow(_jobs(tmp_path, "7", 2), "7", lambda: next(readings, (4, 4)))
    assert codes == [0, 0]
    err = capsys.readouterr().err
    assert "jobs: 1 pending, 1 running, 0 done, 0 failed" in err and "0/4" in err
    assert "jobs: 0 pending, 2 running" in err and "2/4" in err
    assert "4/4" in err and "jobs: 0 pending, 0 running, 2 done, 0 failed" in err  # how they ended
    assert "warning" not in err


def test_a_follow_bar_that_cannot_read_the_progress_says_so_once_and_goes_on(tmp_path, monkeypatch, capsys):
    from harness.launchers import slurm
    from harness.launchers.follow import FollowBar

    calls = []

    def unreadable():
        calls.append(1)
        raise RuntimeError("could not connect to postgresql://harness:s3cret@db/claims: refused")

    _fake_squeue(tmp_path, monkeypatch, [_listing("8_0|RUNNING"), _listing("8_0|RUNNING"), _listing("8_0|COMPLETED")])
    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    assert SlurmLauncher(folder=tmp_path)._follow(_jobs(tmp_path, "8", 1), "8", unreadable) == [0]
    err = capsys.readouterr().err
    assert len(calls) >= 3 and err.count("progress cannot be read") == 1, err
    assert "harness:***@db" in err and "s3cret" not in err
    assert "jobs: 0 pending, 1 running" in err  # the bar still follows the jobs
    # A reading that fails once, then succeeds: the bar goes on from it.
    readings = iter([RuntimeError("database is locked"), (1, 2)])

    def flaky():
        got = next(readings, (2, 2))
        if isinstance(got, Exception):
            raise got
        return got

    bar = FollowBar(flaky)
    bar.update("2 workers running")
    bar.update("2 workers running")
    bar.close()
    err = capsys.readouterr().err
    assert err.count("database is locked") == 1 and "1/2" in err and "2/2" in err


def test_squeue_not_answering_is_said_once_and_the_jobs_are_followed_on(tmp_path, monkeypatch, capsys):
    from harness.launchers import slurm

    job = _jobs(tmp_path, "9", 1)[0]
    job.paths.result_pickle.unlink()   # written by the stand-in squeue once the job has ended
    down = "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1"
    _fake_squeue(tmp_path, monkeypatch, [down, down, down, _listing("9_0|RUNNING"),
                                         f"touch {job.paths.result_pickle}; " + _listing("9_0|COMPLETED")])
    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    assert SlurmLauncher(folder=tmp_path)._follow([job], "9", lambda: (0, 1)) == [0]
    err = capsys.readouterr().err
    assert err.count("squeue did not answer") == 1, err
    assert "squeue did not answer (slurm_load_jobs error: Unable to contact slurm controller)" in err
    assert "jobs: 0 pending, 0 running, 0 done, 0 failed, 1 unknown" in err and "jobs: 0 pending, 1 running" in err
    # A job whose result is written has ended, whether or not squeue answers.
    _fake_squeue(tmp_path, monkeypatch, [down])
    unanswered = []
    assert slurm.job_states("9", [job], unanswered) == {"9_0": "COMPLETED"} and len(unanswered) == 1


class _LauncherThatReadsProgress:
    """Runs no worker; reads the engine's progress() as a launcher's bar does, and records it."""
    detach = False

    def __init__(self):
        self.readings = []

    def cores_per_worker(self, workers):
        return 1

    def run(self, commands, envs, progress=None):
        self.readings.append(progress() if progress is not None else None)
        return [0] * len(commands)


def test_the_engines_give_a_launcher_a_progress_it_can_read(sweep_file, study_file, tmp_path):
    """What the follow bar reads under any launcher: done of total from the shared database, and
    None only when the user turned bars off (--no-progress)."""
    from harness.store import Store
    from harness.studies import study_engine
    from harness.specs import study_spec
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    db_url = f"sqlite:///{tmp_path / 'claims.db'}"
    spec = sweep_spec.load(str(sweep_file("followed", {"sparsity": [0.0, 0.5]})))
    shown, hidden = _LauncherThatReadsProgress(), _LauncherThatReadsProgress()
    run_sweep(spec, store, scale="smoke", db_url=db_url, workers=2, launcher=shown, show_progress=True)
    run_sweep(spec, store, scale="smoke", db_url=db_url, workers=2, launcher=hidden, show_progress=False)
    assert shown.readings == [(0, 2)] and hidden.readings == [None]
    study = study_spec.load(str(study_file("followedstudy", space='lr = { type = "float", low = 1e-3, high = 1e-1 }\n',
                                               n_trials=3)))
    launcher = _LauncherThatReadsProgress()
    study_engine.run_study(study, store, db_url, scale="smoke", overrides={}, workers=2, launcher=launcher,
                           show_progress=True, out_dir=tmp_path, log=lambda line: None)
    assert launcher.readings == [(0, 3)]
