"""`harness ui`: MLflow's UI server over the store, and, once it answers, the address of each
experiment: a sweep's opens on its newest cells with their params and metrics as columns (the saved
view its report writes, harness/report/ui_view.py), any other on its runs table. Every link opens
the model-training view (harness/ui_links.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from harness import ui_links
from harness.cli import ports, server_noise
from harness.errors import UserError
from harness.signals import sigterm_as_interrupt
from harness.store import Store, redact

HOST = ports.HOST
START_TIMEOUT_S = 180  # MLflow's first start on a new store migrates its schema
SHOWN_EXPERIMENTS = 10
STOP_GRACE_S = 15


def serve(store: Store, port: int) -> int:
    """Run the server until Ctrl-C or SIGTERM; 0 when stopped so, else the server's own exit status.
    The caller has checked the port (harness/cli/ports.py)."""
    base = f"http://{HOST}:{port}"
    # Its own process group: MLflow's server is a tree (uvicorn workers, a job runner), stopped as one.
    # The store's URI goes through the environment (MLflow's server reads MLFLOW_BACKEND_STORE_URI),
    # not the command line, which every user of the machine sees in `ps`.
    # Its start-up chatter is cut (harness/cli/server_noise.py); its warnings and errors pass.
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--host", HOST, "--port", str(port),
                               *server_noise.SERVER_OPTIONS],
                              env=server_noise.quiet_environment({**os.environ, "MLFLOW_BACKEND_STORE_URI": store.uri}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                              start_new_session=True)
    server_noise.relay(server)
    with sigterm_as_interrupt():
        try:
            _wait_until_answering(server, base, port)
            print(_banner(store, base), flush=True)
            return server.wait()
        except KeyboardInterrupt:
            _stop(server)
            return 0
        except BaseException:
            _stop(server, grace_s=0)
            raise


def _stop(server: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's whole tree, SIGKILL after the grace period."""
    for signal_number, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal_number)
        try:
            server.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_until_answering(server: subprocess.Popen, base: str, port: int) -> None:
    import requests

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise UserError(f"the MLflow UI server exited with status {server.returncode} before answering "
                            f"on port {port}; its own lines above say why.")
        try:
            if requests.get(f"{base}/health", timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise UserError(f"the MLflow UI server did not answer on {base} within {START_TIMEOUT_S} s.")


def _banner(store: Store, base: str) -> str:
    experiments = store.experiments()
    lines = [f"MLflow UI on {base} over {redact(store.uri)} (Ctrl-C stops it)"]
    if not experiments:
        lines.append(f"no experiment yet (run a sweep first); the list: {ui_links.experiments_list(base)}")
        return "\n".join(lines)
    lines.append("last updated first; a sweep opens on its newest cells, their params and metrics as columns:")
    width = max(len(name) for _, name in experiments[:SHOWN_EXPERIMENTS])
    lines += [f"  {name:<{width}}  {_link(store, eid, base)}" for eid, name in experiments[:SHOWN_EXPERIMENTS]]
    if len(experiments) > SHOWN_EXPERIMENTS:
        lines.append(f"  and {len(experiments) - SHOWN_EXPERIMENTS} more: {ui_links.experiments_list(base)}")
    return "\n".join(lines)


def _link(store: Store, experiment_id: str, base: str) -> str:
    """The view of the sweep's newest cells where its report wrote one, else the runs table."""
    view = ui_links.VIEW_TAG_PREFIX + ui_links.CELLS_VIEW
    if view in store.experiment_tags(experiment_id):
        return ui_links.cells_view(experiment_id, base)
    return ui_links.runs_table(experiment_id, base)
