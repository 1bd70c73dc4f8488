"""Shared fixtures: a real SQLite MLflow store in a temporary folder, and tiny sweep files that
run the real engine on the tiny CNN and synthetic data in a second or two."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
# Every sweep invocation calibrates the machine for about a second; the suite starts hundreds.
os.environ.setdefault("HARNESS_CALIBRATION_S", "0.05")
# `harness reproduce` and `harness study` refuse a dirty working tree (harness/cli/dirty_tree.py); the
# suite's runs are throwaway and often run from a tree being edited.
os.environ.setdefault("HARNESS_ALLOW_DIRTY", "1")
# Peaks the tests measure (under their own load) stay out of the user's cache (harness/training/peak.py).
if "HARNESS_CACHE_DIR" not in os.environ:
    os.environ["HARNESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="harness-test-cache-")
    atexit.register(shutil.rmtree, os.environ["HARNESS_CACHE_DIR"], ignore_errors=True)
# The scales the tests' sweeps and studies run at stay out of the checkout's mlruns/ (harness/cli/last_scale.py).
if "HARNESS_STATE_DIR" not in os.environ:
    os.environ["HARNESS_STATE_DIR"] = tempfile.mkdtemp(prefix="harness-test-state-")
    atexit.register(shutil.rmtree, os.environ["HARNESS_STATE_DIR"], ignore_errors=True)
# The reports a test's `harness study`, `report` or `reproduce` writes without --out (and the browser
# test's screenshots) stay out of the checkout's reports/ (harness/folders.py).
if "HARNESS_REPORTS_DIR" not in os.environ:
    os.environ["HARNESS_REPORTS_DIR"] = tempfile.mkdtemp(prefix="harness-test-reports-")
    atexit.register(shutil.rmtree, os.environ["HARNESS_REPORTS_DIR"], ignore_errors=True)


def under_ci() -> bool:
    """True under CI (.ci/run exports CI=true), whose machine provides what the tests need."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_unless_ci(message: str) -> None:
    """Skip, saying what this machine lacks; under CI, which provides it, fail instead: a skip there
    would hide a test that never ran. (GPU tests stay skips: CI's machine has no GPU.)"""
    if under_ci():
        pytest.fail(message)
    pytest.skip(message)


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped, saying why, where torch sees no CUDA GPU."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here); "
                                   "make gpu-check runs it on a GPU machine")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


class _IdleLoad:
    """The load probe of an idle machine."""
    def finish(self) -> dict[str, float]:
        return {"load_avg_before": 0.0, "load_avg_after": 0.0, "other_busy_cores": 0.0, "contended": 0.0}


@pytest.fixture(autouse=True)
def cells_timed_on_an_idle_machine(monkeypatch):
    """The cells a test runs in this process see an idle machine: a report marks a contended cell and
    leaves its times out of speed-ups and checks (harness/report/contention.py), so the load of the
    machine the suite runs on (often shared) must not decide what a test of the report expects. The
    tests of contention patch a busy machine in; the probe itself is tested in test_machine_load.py."""
    from harness.machine import machine_load

    monkeypatch.setattr(machine_load, "LoadWatch", _IdleLoad)


@pytest.fixture(scope="session", autouse=True)
def empty_store_template(tmp_path_factory):
    """One SQLite store migrated for real in this session; every new SQLite store the harness makes
    after it, here or in a process a test starts, is a copy (harness/store/tracking.py, EMPTY_STORE_ENV)
    instead of MLflow's migrations once more: a second or more each, for a hundred fresh stores. A test
    of the migrations themselves unsets it (monkeypatch.delenv)."""
    import sqlite3

    from harness.store.tracking import EMPTY_STORE_ENV, Store

    folder = tmp_path_factory.mktemp("empty-store")
    os.environ.pop(EMPTY_STORE_ENV, None)
    built = folder / "built" / "mlflow.db"
    Store(f"sqlite:///{built}")
    template = folder / "mlflow.db"
    # A copy through SQLite (the built store's client left it in WAL mode), kept as one plain file.
    with contextlib.closing(sqlite3.connect(built)) as source, contextlib.closing(sqlite3.connect(template)) as copy:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode = DELETE").fetchone()
    os.environ[EMPTY_STORE_ENV] = str(template)
    yield template
    os.environ.pop(EMPTY_STORE_ENV, None)


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    from harness.store.tracking import Store

    return Store(f"sqlite:///{tmp_path_factory.mktemp('mlruns') / 'mlflow.db'}")


TINY_BASE = {
    "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 256, "test_limit": 128,
    "epochs": 2, "warmup_epochs": 1, "batch_size": 32, "lr": 0.01, "threads": 1,
}


def toml_value(value) -> str:
    """`value` written as TOML: a number, string, boolean, list or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # TOML's basic strings escape as JSON's do
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def write_sweep(folder: Path, name: str, grid: dict, base: dict | None = None, repeats: int = 1,
                published: str = "") -> Path:
    """A sweep file like the shipped ones, shrunk to the tiny CNN on synthetic data."""
    base = {**TINY_BASE, **(base or {})}
    text = textwrap.dedent(f"""\
        name = "{name}"
        title = "test sweep {name}"
        experiment = "pruning"
        repeats = {repeats}
        [base]
        """) + "".join(f"{k} = {toml_value(v)}\n" for k, v in base.items())
    text += "[grid]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in grid.items())
    text += "[scales.smoke]\nepochs = 1\n"
    text += '[report]\nx = "sparsity"\nbaseline = { sparsity = 0.0 }\n'
    text += 'metrics = ["train_time_s", "test_accuracy", "param_count"]\n' + published
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def sweep_file(tmp_path):
    def make(name, grid, **kwargs):
        return write_sweep(tmp_path, name, grid, **kwargs)
    return make


# --- studies ---------------------------------------------------------------------------
TINY_STUDY_BASE = {**TINY_BASE, "warmup_epochs": 0, "pruning_backend": "torch-pruning"}


def write_study(folder: Path, name: str, *, space: str, metrics=("test_accuracy",), directions=("maximize",),
                n_trials: int = 4, base: dict | None = None, extra: str = "") -> Path:
    """A study file like the shipped ones, shrunk to the tiny CNN on synthetic data."""
    text = textwrap.dedent(f"""\
        name = "{name}"
        experiment = "pruning"
        metrics = {toml_value(list(metrics))}
        directions = {toml_value(list(directions))}
        n_trials = {n_trials}
        """) + extra + "\n[space]\n" + textwrap.dedent(space) + "\n[base]\n"
    text += "".join(f"{k} = {toml_value(v)}\n" for k, v in {**TINY_STUDY_BASE, **(base or {})}.items())
    path = folder / f"study_{name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def study_file(tmp_path):
    def make(name, **kwargs):
        return write_study(tmp_path, name, **kwargs)
    return make


# A real PostgreSQL server: .ci/run installs and starts one and creates this role.
POSTGRES_URL = os.environ.get("HARNESS_TEST_POSTGRES", "postgresql://harness_ci:harness_ci@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def postgres_server():
    try:
        import psycopg

        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except Exception as err:  # no server, no role, no driver: these tests cannot run here
        from harness.store import redact

        skip_unless_ci(f"no PostgreSQL server at {redact(POSTGRES_URL)} ({type(err).__name__}); "
                       ".ci/run installs and starts one (or set HARNESS_TEST_POSTGRES)")
    return POSTGRES_URL


def temporary_database(server_url: str, prefix: str = "harness_test"):
    """A new database on the PostgreSQL server, dropped afterwards; yields its URL."""
    import uuid

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield server_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def postgres_db(postgres_server):
    """A database of the test's own, dropped afterwards; yields its URL."""
    yield from temporary_database(postgres_server)


def assert_one_sentence_exit_2(argv: list[str], words: list[str], capsys) -> None:
    """`harness ARGV` ends in exit 2 with one line on stderr containing every word."""
    from harness.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness: error:") and "\n" not in err, err
    for word in words:
        assert word in err


def harness_command(*args: str, bars: bool = False) -> list[str]:
    """`harness ARGS` (a sweep or study) as a command line for a real process, without progress bars
    unless `bars` (a test of the bars themselves)."""
    return [sys.executable, "-m", "harness", *args, *([] if bars else ["--no-progress"])]


def launched_here(capfd, *args: str) -> tuple[int, str]:
    """`harness ARGS` (a `--workers` launcher) run in this process, its workers real processes: the
    exit status, and what the launcher and its workers wrote to stderr (capfd: the workers write to
    the file descriptors they inherit). The launcher costs no interpreter start-up of its own, for
    tests of what its workers do and share; a test that signals or kills the launcher starts it as a
    process of its own."""
    from harness.cli import main

    capfd.readouterr()
    code = main(harness_command(*args)[3:])
    return code, capfd.readouterr().err


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def visible_lines(stderr: str) -> list[str]:
    """What a terminal shows of stderr: a progress bar redrawn with carriage returns and erased
    (tqdm's leave=False) leaves only what came after its last return."""
    return [shown for line in stderr.split("\n") if (shown := line.split("\r")[-1]).strip()]


def experiment_runs(uri: str, experiment: str, view=None) -> list:
    """The experiment's runs (active ones unless `view` says otherwise), read with MLflow's own
    client; none before the experiment exists."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], "", view or ViewType.ACTIVE_ONLY) if found else []


def mlflow_client(store):
    """MLflow's own client on the test's store: tests check what MLflow holds independently of the
    harness's Store (the harness itself reaches MLflow only through Store)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=store.uri)


# A real Slurm: .ci/slurm.sh starts a one-node cluster on this machine (.ci/run does, for CI).
@pytest.fixture(scope="session")
def slurm_cluster():
    """The partition names of a Slurm that answers and has a node up; skip (fail under CI) otherwise."""
    import shutil
    import subprocess

    reason = None
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        reason = "no Slurm here (sbatch, sinfo not on PATH)"
    else:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True, timeout=30)
        states = out.stdout.split()[1::2]
        if out.returncode != 0 or not {"idle", "mixed", "allocated"} & set(states):
            reason = f"Slurm does not answer or has no node up ({(out.stderr or out.stdout).strip()[:200]})"
    if reason:
        skip_unless_ci(reason + "; `.ci/slurm.sh start` starts a one-node cluster (root)")
    return sorted({p.rstrip("*") for p in out.stdout.split()[0::2]})


# dp_scratch's DDP branch: two gloo ranks in torchrun processes, seconds of start-up each time. One
# run without a warm-up serves the tests that read different things from it (test_parallel_sweeps:
# the ranks end on one device's parameters; test_warmup: a warm-up changes none of its figures).
DP_SCRATCH_DDP = {"experiment": "dp_scratch", "model": "lenet_d2l", "dataset": "digits", "train_limit": 128,
                  "test_limit": 64, "epochs": 2, "batch_size": 32, "lr": 0.2, "threads": 1, "world_size": 2,
                  "dp_impl": "ddp", "backend": "gloo"}


@pytest.fixture(scope="session")
def dp_scratch_ddp_without_warmup() -> dict:
    """The metrics of DP_SCRATCH_DDP run with warmup_epochs=0 (read them, do not change them)."""
    from experiments import dp_scratch, make_config

    return dp_scratch.run(make_config({**DP_SCRATCH_DDP, "warmup_epochs": 0}))
