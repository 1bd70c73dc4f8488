"""What `harness ui` prints as its server starts: the UI's addresses, not a page of start-up chatter,
and still every warning and error of the server."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import free_port

from harness.cli import server_noise


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_ui_prints_its_addresses_without_the_servers_start_up_noise(tmp_path):
    server = subprocess.Popen([sys.executable, "-m", "harness", "ui", "--port", str(free_port()), "--tracking-uri",
                               f"sqlite:///{tmp_path / 'mlflow.db'}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    printed: list[str] = []
    threading.Thread(target=lambda: printed.extend(server.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("workflowType" in line for line in printed):
            assert server.poll() is None, "".join(printed)[-3000:]
            time.sleep(0.5)
        time.sleep(3)   # what the workers print once the server answers comes in too
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    shown = "".join(printed)
    assert any("workflowType" in line for line in printed), shown[-3000:]
    for noise in ("DeprecationWarning", "Child process", "INFO", "Registry store URI", "Security middleware"):
        assert noise not in shown, shown[-3000:]


def test_the_servers_warnings_errors_and_tracebacks_pass_and_restated_defaults_do_not():
    said = io.StringIO("".join(f"{line}\n" for line in [
        "Registry store URI not provided. Using backend store URI.",
        "[MLflow] Security middleware enabled with default settings (localhost-only). To allow ...",
        "2026/12/04 13:53:28 WARNING mlflow.store: the database is locked, retrying",
        "Traceback (most recent call last):",
        "sqlalchemy.exc.OperationalError: unable to open database file",
        "[MLflow] Security middleware enabled with allowed hosts: example.org",
    ]))
    out = io.StringIO()
    server_noise._copy(said, out)
    assert out.getvalue().splitlines() == [
        "2026/12/04 13:53:28 WARNING mlflow.store: the database is locked, retrying",
        "Traceback (most recent call last):",
        "sqlalchemy.exc.OperationalError: unable to open database file",
        "[MLflow] Security middleware enabled with allowed hosts: example.org",
    ]


def test_the_server_keeps_a_users_own_warning_filters():
    env = server_noise.quiet_environment({"PYTHONWARNINGS": "error::ResourceWarning"})
    assert env["PYTHONWARNINGS"].split(",") == [server_noise.STARLETTE_DEPRECATION, "error::ResourceWarning"]
    assert env["MLFLOW_LOGGING_LEVEL"] == "WARNING"
