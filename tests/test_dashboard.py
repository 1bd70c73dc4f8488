"""`harness dashboard` (make dashboard): optuna-dashboard served on 127.0.0.1 over the study storage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import psutil
import pytest

from conftest import assert_one_sentence_exit_2, free_port

HARNESS = str(Path(sys.executable).with_name("harness"))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


@pytest.mark.multiprocess
def test_the_dashboard_serves_the_studies_of_the_storage_on_localhost(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="watched", storage=storage, directions=["minimize", "maximize"])
    study.tell(study.ask(), [1.0, 0.5])
    port = free_port()
    server = subprocess.Popen([HARNESS, "dashboard", "--storage", storage, "--port", str(port),
                               "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/dashboard")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        assert status == 200, server.stdout.read().decode() if server.poll() is not None else f"status {status}"
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
