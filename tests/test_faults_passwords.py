"""Passwords: never on a command line the harness starts, never in a file it writes,
reproduced for real: each gives one sentence on stderr, the right exit status, no traceback,
and the store holds afterwards what it should. How the faults are made: tests/fault_helpers.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import free_port, mlflow_client

from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, Store

from fault_helpers import LR_SPACE, PASSWORD, closed_port, tiny_sweep
from fault_helpers import shared_password_server, uri  # noqa: F401 (fixtures)


# --- passwords: never on a command line the harness starts, never in a file it writes ---------------------


class _RecordingLauncher:
    """Records the command lines and environments an engine hands its workers; runs none."""
    detach = False

    def __init__(self):
        self.commands, self.envs = [], []

    def cores_per_worker(self, workers):
        return 1

    def run(self, commands, envs, progress=None):
        self.commands, self.envs = commands, envs
        return [0] * len(commands)


def test_workers_get_the_store_locations_through_the_environment_not_argv(sweep_file, study_file, tmp_path):
    from harness.studies import study_engine
    from harness.specs import study_spec
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    db_url = f"sqlite:///{tmp_path / 'claims.db'}"
    sweep, study = _RecordingLauncher(), _RecordingLauncher()
    run_sweep(sweep_spec.load(str(sweep_file("envs", {"sparsity": [0.0, 0.5]}))), store, scale="smoke",
              db_url=db_url, workers=2, launcher=sweep, show_progress=False)
    spec = study_spec.load(str(study_file("envstudy", space='lr = { type = "float", low = 1e-3, high = 1e-1 }\n')))
    study_engine.run_study(spec, store, db_url, scale="smoke", overrides={}, workers=2, launcher=study,
                           show_progress=False,
                           out_dir=tmp_path, log=lambda line: None)
    for launcher in (sweep, study):
        assert len(launcher.commands) == 2
        for command, env in zip(launcher.commands, launcher.envs):
            assert "--tracking-uri" not in command and "--storage" not in command, command
            assert not any(store.uri in a or db_url in a for a in command), command
            assert env["MLFLOW_TRACKING_URI"] == store.uri and env["HARNESS_STORAGE"] == db_url


def test_a_slurm_job_array_gets_the_store_locations_from_the_submitting_environment(monkeypatch, tmp_path):
    """What submitit pickles (the worker commands and environments) holds no store location: sbatch
    passes the submitting process's environment on, and that is where they are while it submits."""
    import submitit

    from harness.launchers import slurm

    seen = {}

    class Executor:
        def __init__(self, folder):
            pass

        def update_parameters(self, **kwargs):
            pass

        def map_array(self, fn, commands, envs):
            seen.update(envs=envs, environ=dict(os.environ))
            raise RuntimeError(f"sbatch: error: cannot reach postgresql://u:{PASSWORD}@db/x")

    monkeypatch.setattr(submitit, "SlurmExecutor", Executor)
    launcher = slurm.SlurmLauncher(folder=tmp_path, shape=slurm.NodeShape(2, 0))
    tracking, storage = f"http://u:{PASSWORD}@host:5000", f"postgresql://u:{PASSWORD}@db/x"
    monkeypatch.delenv("HARNESS_STORAGE", raising=False)
    from harness.errors import UserError

    with pytest.raises(UserError) as refused:
        launcher.run([["python", "-m", "harness", "sweep", "s.toml"]],
                     [{"MLFLOW_TRACKING_URI": tracking, "HARNESS_STORAGE": storage, "OMP_NUM_THREADS": "1"}])
    assert PASSWORD not in str(refused.value) and "***" in str(refused.value)
    assert all(PASSWORD not in v for env in seen["envs"] for v in env.values()) and seen["envs"][0]["OMP_NUM_THREADS"]
    assert seen["environ"]["MLFLOW_TRACKING_URI"] == tracking and seen["environ"]["HARNESS_STORAGE"] == storage
    assert "HARNESS_STORAGE" not in os.environ  # put back as it was


def _stub_ui_server(monkeypatch) -> list:
    """harness ui's MLflow server replaced by one that ran and stopped at once; the list collects
    the (argv, env) of every server started."""
    from harness.cli import ui_server

    started = []

    class Server:   # what serve() needs of the MLflow server it starts: it ran and stopped
        def __init__(self, argv, env=None, **_):
            started.append((argv, env))

        def wait(self):
            return 0

    monkeypatch.setattr(ui_server, "subprocess", SimpleNamespace(Popen=Server, PIPE=subprocess.PIPE))
    monkeypatch.setattr(ui_server, "_wait_until_answering", lambda *a: None)
    return started


def test_the_ui_and_dashboard_servers_get_the_store_through_the_environment(tmp_path, monkeypatch, capsys):
    from harness.cli import ui_server
    from harness.store import Store

    started = _stub_ui_server(monkeypatch)
    monkeypatch.setattr(ui_server, "_banner", lambda store, base: "")
    monkeypatch.setattr(os, "execve", lambda path, argv, env: started.append((argv, env)))
    monkeypatch.setattr("harness.cli.commands._make_study_tables", lambda storage: None)  # no server listens
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert ui_server.serve(Store(uri), free_port()) == 0
    storage = f"postgresql://harness:{PASSWORD}@127.0.0.1:{closed_port()}/studies"
    assert main(["dashboard", "--storage", storage, "--tracking-uri", uri]) == 0
    banners = capsys.readouterr().out
    (ui_argv, ui_env), (board_argv, board_env) = started
    assert uri not in " ".join(ui_argv) and ui_env["MLFLOW_BACKEND_STORE_URI"] == uri
    assert PASSWORD not in " ".join(board_argv) and board_env["HARNESS_STORAGE"] == storage
    assert PASSWORD not in banners and "harness:***@127.0.0.1" in banners


@pytest.mark.parametrize("uri, shown", [
    ("postgresql://bob:s3cret@db:5432/x", "postgresql://bob:***@db:5432/x"),
    ("postgresql+psycopg://bob:p%40ss@db/x", "postgresql+psycopg://bob:***@db/x"),
    ("http://u:pw@host:5000", "http://u:***@host:5000"),
    ("sqlite:////tmp/a/mlflow.db", "sqlite:////tmp/a/mlflow.db"),
])
def test_redact_hides_every_form_of_password(uri, shown):
    from harness.store.uris import hide_passwords, redact

    assert redact(uri) == shown
    assert hide_passwords(f"could not connect to {uri}: refused") == f"could not connect to {shown}: refused"


def _command_lines(proc) -> set[str]:
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        return {" ".join(p.cmdline()) for p in [parent, *parent.children(recursive=True)]}
    except psutil.Error:
        return set()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_no_password_in_any_file_written_or_command_line_started(shared_password_server, tmp_path, monkeypatch,
                                                                 capsys):
    password_server = shared_password_server
    path = tiny_sweep(tmp_path, "secret", [0.0, 0.3, 0.6], epochs=2)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": password_server.uri}  # given only through the environment
    command = [sys.executable, "-m", "harness", "sweep", str(path), "--workers", "2", "--no-progress",
               "--storage", f"sqlite:///{work / 'optuna.db'}"]
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while proc.poll() is None:  # every command line of the launcher and its workers, as `ps` shows them
        seen |= _command_lines(proc)
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "View run" not in out and "View experiment" not in out, out  # MLflow's own lines stay off stdout
    assert sum("--worker " in line for line in seen) >= 1, seen
    texts = {"sweep stdout": out, "sweep stderr": err, **{f"argv {i}": line for i, line in enumerate(seen)}}
    reports = tmp_path / "reports"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", password_server.uri)
    for args in (["report", str(path), "--out", str(reports)], ["report", "--out", str(reports)],
                 ["report", str(tiny_sweep(tmp_path, "never", [0.0])), "--out", str(reports)]):
        capsys.readouterr()
        main(args)  # in this process: the reports read the store as a separate process would
        said = capsys.readouterr()
        texts[" ".join(args[:2])] = said.out + said.err
    assert "has not been run in http://harness:***@" in texts[f"report {tmp_path / 'never.toml'}"]
    assert (reports / "REPRODUCTION.md").is_file() and any(reports.glob("secret-*.md")), sorted(p.name for p in reports.iterdir())
    # Every file: the reports, the claims database, and the server's store (params, tags, descriptions,
    # artifacts), which holds whatever the harness logged.
    for file in [p for folder in (tmp_path, password_server.folder) for p in folder.rglob("*") if p.is_file()]:
        texts[str(file)] = file.read_bytes().decode("latin-1")
    leaks = [where for where, text in texts.items() if PASSWORD in text]
    assert not leaks, leaks
    runs = mlflow_client(SimpleNamespace(uri=password_server.uri)).search_runs(
        [mlflow_client(SimpleNamespace(uri=password_server.uri)).get_experiment_by_name("secret").experiment_id])
    assert sorted(r.data.tags.get(OUTCOME) for r in runs if CELL_ID in r.data.tags) == ["ok"] * 3


@pytest.mark.slow
def test_no_password_in_a_studys_files_output_or_the_ui_banner(shared_password_server, study_file, tmp_path,
                                                                monkeypatch, capsys):
    password_server = shared_password_server
    from harness.cli import ui_server

    path = study_file("secretstudy", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", password_server.uri)  # given only through the environment
    args = ["study", str(path), "--no-progress", "--storage", f"sqlite:///{tmp_path / 'work' / 'optuna.db'}"]
    (tmp_path / "work").mkdir()
    texts = {}
    for extra in (["--out", str(tmp_path / "reports")], ["--status"]):
        capsys.readouterr()
        assert main([*args, *extra]) == 0
        said = capsys.readouterr()
        texts[" ".join(extra)] = said.out + said.err
    texts["ui banner"] = ui_server._banner(Store(password_server.uri), "http://127.0.0.1:5999")
    assert "harness:***@127.0.0.1" in texts["ui banner"]
    # The study's reports, its storage (the study's attributes name the tracking store) and the
    # server's store (the parent run's params and description).
    files = {str(p): p.read_bytes().decode("latin-1")
             for folder in (tmp_path, password_server.folder) for p in folder.rglob("*") if p.is_file()}
    assert any("harness:***@127.0.0.1" in text for text in files.values())  # the store was named, redacted
    assert (tmp_path / "reports" / "secretstudy-full.md").is_file()
    leaks = [where for where, text in {**texts, **files}.items() if PASSWORD in text]
    assert not leaks, leaks


def test_the_ui_server_and_its_banner_hide_a_database_stores_password(monkeypatch, capsys):
    from harness.cli import ui_server

    started = _stub_ui_server(monkeypatch)
    uri = f"postgresql://harness:{PASSWORD}@127.0.0.1:5432/mlflow"
    store = SimpleNamespace(uri=uri, experiments=lambda: [("1", "secret")],   # what the banner reads of a store
                            experiment_tags=lambda experiment_id: {})
    assert ui_server.serve(store, free_port()) == 0
    banner = capsys.readouterr().out
    (argv, env), = started
    assert PASSWORD not in " ".join(argv) and env["MLFLOW_BACKEND_STORE_URI"] == uri
    assert PASSWORD not in banner and "postgresql://harness:***@127.0.0.1:5432/mlflow" in banner
