"""What MLflow's UI server prints while it starts, cut to what a user needs: its warnings and
errors pass, its start-up chatter does not.

Before the UI's addresses a user saw a page of lines: uvicorn's INFO lines from four worker processes,
MLflow's INFO lines (job executors, schedulers), a StarletteDeprecationWarning from MLflow's own
import of starlette (one per worker), two lines restating MLflow's defaults, and on a busy machine
"Child process [N] died": uvicorn's supervisor had killed a worker too starved to answer its 5-second
health check, and started another. One worker has no supervisor, and is plenty for one user's
browser (its requests are served on threads); it also starts a quarter of the processes."""

from __future__ import annotations

import sys
import threading

# `mlflow ui` options: one worker, and uvicorn's own lines only from WARNING up.
SERVER_OPTIONS = ["--workers", "1", "--uvicorn-opts", "--log-level warning"]

# Lines MLflow prints on every start that restate its defaults; matched at the line's start.
RESTATED_DEFAULTS = ("Registry store URI not provided. Using backend store URI.",
                     "[MLflow] Security middleware enabled with default settings (localhost-only).")

# A deprecation inside MLflow's import of starlette, not the user's to act on (Python's -W syntax:
# the message's start).
STARLETTE_DEPRECATION = "ignore:starlette.middleware.wsgi is deprecated"


def quiet_environment(env: dict[str, str]) -> dict[str, str]:
    """The server's environment: MLflow's loggers from WARNING up, and that one deprecation ignored
    (a user's own PYTHONWARNINGS kept, after it)."""
    warnings = ",".join(filter(None, [STARLETTE_DEPRECATION, env.get("PYTHONWARNINGS")]))
    return {**env, "MLFLOW_LOGGING_LEVEL": "WARNING", "PYTHONWARNINGS": warnings}


def relay(server) -> None:
    """Copy the server's output (its stdout and stderr pipes) to this process's, as it comes, less
    the lines restating defaults; returns at once (daemon threads, ending with the pipes)."""
    for stream, out in ((getattr(server, "stdout", None), sys.stdout), (getattr(server, "stderr", None), sys.stderr)):
        if stream is not None:
            threading.Thread(target=_copy, args=(stream, out), name="ui-server-output", daemon=True).start()


def _copy(stream, out) -> None:
    for line in stream:
        if not line.startswith(RESTATED_DEFAULTS):
            out.write(line)
            out.flush()
