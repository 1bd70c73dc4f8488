"""`harness dashboard` (make dashboard): optuna-dashboard served on 127.0.0.1 over the study storage."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import psutil
import pytest
import sqlalchemy

from conftest import assert_one_sentence_exit_2, free_port

HARNESS = str(Path(sys.executable).with_name("harness"))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def _start(storage: str, port: int, tmp_path) -> subprocess.Popen:
    """`harness dashboard` over `storage`, once its page answers (the test fails with its output if
    it exits first)."""
    server = subprocess.Popen([HARNESS, "dashboard", "--storage", storage, "--port", str(port),
                               "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline, status = time.monotonic() + 90, None
    while time.monotonic() < deadline and server.poll() is None:
        try:
            status, _ = _get(f"http://127.0.0.1:{port}/dashboard")
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    if status != 200:
        server.kill()
        assert status == 200, server.stdout.read().decode()[-3000:]
    return server


@pytest.mark.multiprocess
def test_the_dashboard_serves_the_studies_of_the_storage_on_localhost(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="watched", storage=storage, directions=["minimize", "maximize"])
    study.tell(study.ask(), [1.0, 0.5])
    port = free_port()
    server = _start(storage, port, tmp_path)
    try:
        status, body = _get(f"http://127.0.0.1:{port}/api/studies")
        assert status == 200
        assert [s["study_name"] for s in json.loads(body)["study_summaries"]] == ["watched"]
        # `harness dashboard` becomes the server (exec): its own process listens, on loopback only.
        listening = [c.laddr for c in psutil.Process(server.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and {a.ip for a in listening} == {"127.0.0.1"}, listening
    finally:
        server.terminate()
        server.wait(timeout=30)
    # Stopping that one process stops the server: nothing answers on its port any more.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _get(f"http://127.0.0.1:{port}/dashboard")


def test_no_study_database_yet_is_one_sentence(tmp_path, capsys):
    assert_one_sentence_exit_2(["dashboard", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                               ["no study database at", "run a study first"], capsys)


def _claims_only(tmp_path) -> str:
    """A shared database as any sweep leaves it: the claims table, and no study ever run."""
    from harness.store import Claims

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    Claims(storage).close()
    assert "studies" not in sqlalchemy.inspect(sqlalchemy.create_engine(storage)).get_table_names()
    return storage


@pytest.mark.multiprocess
def test_the_dashboard_over_a_database_only_sweeps_have_used_shows_no_study(tmp_path):
    storage = _claims_only(tmp_path)
    server = _start(storage, port := free_port(), tmp_path)
    try:
        status, body = _get(f"http://127.0.0.1:{port}/api/studies")
        assert status == 200 and json.loads(body)["study_summaries"] == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_dashboard_checks_its_port_before_the_storage(tmp_path, capsys, monkeypatch):
    def never(*args):
        raise AssertionError("the dashboard was started on a port in use")

    monkeypatch.setattr("os.execve", never)   # it would replace this test's own process
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        # A storage that is not a database at all: the port is what is wrong first.
        assert_one_sentence_exit_2(["dashboard", "--storage", "mysql+nodriver://x@127.0.0.1:1/y", "--port",
                                    str(port), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                                   [f"port {port}", "already in use", "make dashboard PORT="], capsys)
