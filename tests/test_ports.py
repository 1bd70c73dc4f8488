"""The port `harness ui` and `harness dashboard` listen on: checked first, and a port browsers refuse
is warned about with one that works."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from harness.cli import main, ports


def _free(port: int) -> bool:
    return ports.is_free(port)


@pytest.mark.parametrize("command, target", [("ui", "make ui"), ("dashboard", "make dashboard")])
def test_a_port_browsers_refuse_is_warned_about_with_a_safe_one(command, target, tmp_path, capsys, monkeypatch):
    if not _free(5060):
        pytest.skip("port 5060 is in use on this machine")
    started = []
    # Stop where each command would start its server: the warning is said before that.
    monkeypatch.setattr("harness.cli.ui_server.serve", lambda store, port: started.append(port) or 0)
    monkeypatch.setattr("os._exit", lambda code: started.append(code))
    monkeypatch.setattr("os.execve", lambda *a: started.append(a[0]))
    sqlite3.connect(tmp_path / "optuna.db").close()   # the dashboard needs a database to show
    main([command, "--port", "5060", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
          *(["--storage", f"sqlite:///{tmp_path / 'optuna.db'}"] if command == "dashboard" else [])])
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1, warning
    assert "port 5060" in warning[0] and "ERR_UNSAFE_PORT" in warning[0] and f"{target} PORT=" in warning[0]
    safe = int(warning[0].rsplit("PORT=", 1)[1].rstrip(").").strip())
    assert safe not in ports.BROWSER_BLOCKED_PORTS and safe > 5060
    assert started, "the server was not started after the warning"


def test_an_ordinary_port_gets_no_warning(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ports.check_port(port, "ui")
    assert capsys.readouterr().err == ""


def test_the_suggested_port_skips_blocked_and_busy_ones():
    assert ports.browser_safe_port(6664) not in range(6665, 6670)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        if busy - 1 not in ports.BROWSER_BLOCKED_PORTS:
            assert ports.browser_safe_port(busy - 1) > busy
