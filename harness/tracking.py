"""The one way anything is logged: an MLflow store, reached through MlflowClient.

Layout in the store: one MLflow experiment per sweep (or per experiment for single runs); each
sweep invocation is a parent run; each cell is a child run whose `harness.cell_id` tag identifies
the resolved config. The sweep engine reads these tags back to decide what is already done.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil

from harness.errors import UserError
from harness.fingerprint import REPO_ROOT, fingerprint

DEFAULT_URI = f"sqlite:///{REPO_ROOT / 'mlruns' / 'mlflow.db'}"

# Tag names the harness writes and reads back.
SWEEP, SCALE, CELL_ID, OUTCOME, REASON, HOST, PID, PID_START, PARENT = (
    "harness.sweep", "harness.scale", "harness.cell_id", "harness.outcome", "harness.reason",
    "harness.host", "harness.pid", "harness.pid_start", "mlflow.parentRunId",
)
OK, FAILED, SKIPPED, INTERRUPTED = "ok", "failed", "skipped", "interrupted"
NOTE_PREFIX = "harness.note."  # + key: a text value an experiment returned (a captured warning, a dtype)
PRUNED = "pruned"  # a study trial stopped early by its pruner (issue 5)


def resolve_uri(cli_value: str | None = None) -> str:
    """--tracking-uri wins, then MLFLOW_TRACKING_URI, then the embedded SQLite store under mlruns/."""
    return cli_value or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def redact(uri: str) -> str:
    """The URI with any password replaced, for messages."""
    parts = urlsplit(uri)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


def _quiet_mlflow_logs() -> None:
    # A new SQLite store runs ~40 schema migrations, each logged at INFO by alembic.
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking"):
        logging.getLogger(name).setLevel(logging.WARNING)


@dataclass
class CellRecord:
    run_id: str
    status: str
    outcome: str | None
    reason: str | None
    host: str | None
    pid: int | None
    metrics: dict[str, float]


class Store:
    """An open, reachable MLflow store."""

    def __init__(self, uri: str | None = None):
        from mlflow.tracking import MlflowClient

        _quiet_mlflow_logs()
        self.uri = resolve_uri(uri)
        self.artifact_root = self._artifact_root()
        self._probe()
        if self.uri.startswith("sqlite:"):
            from harness.sharedb import patient_sqlite

            patient_sqlite()  # WAL: the UI and other workers read while a sweep writes
        try:
            with self._creation_lock():
                self.client = MlflowClient(tracking_uri=self.uri)
                self.client.search_experiments(max_results=1)
        except Exception as err:  # any failure here means the store is not usable as given
            raise UserError(f"cannot open the tracking store {redact(self.uri)}: {_first_line(err)}") from None

    def _creation_lock(self):
        """Several workers opening a new SQLite store at once would race through MLflow's schema
        migrations ("duplicate column"); one at a time, the later ones find it made (issue 5)."""
        import contextlib
        import fcntl

        if self.artifact_root is None:
            return contextlib.nullcontext()

        @contextlib.contextmanager
        def locked():
            with open(self.artifact_root.parent / ".mlflow-db.lock", "w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                yield

        return locked()

    def _artifact_root(self) -> Path | None:
        if self.uri.startswith("sqlite:///"):
            db = Path(self.uri.removeprefix("sqlite:///"))
            try:
                db.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UserError(f"cannot create the tracking store folder {db.parent}: {err.strerror}.") from None
            return db.parent / "artifacts"
        if self.uri.startswith("file:") or "://" not in self.uri:
            raise UserError(
                f"tracking URI {self.uri} is a plain-file store, which MLflow has deprecated; use "
                "sqlite:///path/mlflow.db, a database URL or an http(s):// tracking server."
            )
        return None

    def _probe(self) -> None:
        """Fail fast on an unreachable server instead of MLflow's minutes of retries."""
        if not self.uri.startswith(("http://", "https://")):
            return
        import requests

        try:
            requests.get(self.uri.rstrip("/") + "/health", timeout=5).raise_for_status()
        except requests.RequestException as err:
            raise UserError(f"cannot reach the MLflow tracking server at {redact(self.uri)} "
                            f"({type(err).__name__}); start it or pass another --tracking-uri.") from None

    # --- experiments and runs ------------------------------------------------------------------
    def experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return found.experiment_id
        location = (self.artifact_root / name).resolve().as_uri() if self.artifact_root else None
        try:
            # The kind tag makes the MLflow UI open on the runs table (model development), not
            # on its GenAI traces overview.
            return self.client.create_experiment(name, artifact_location=location,
                                                 tags={"mlflow.experimentKind": "custom_model_development"})
        except Exception:  # created by a concurrent process in the meantime
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def start_run(self, experiment_id: str, name: str, tags: dict[str, str],
                  parent_id: str | None = None) -> str:
        me = psutil.Process()
        tags = {**fingerprint(), **tags, HOST: fingerprint()["host"], PID: str(me.pid),
                PID_START: f"{me.create_time():.2f}", "mlflow.source.git.commit": fingerprint()["git.commit"]}
        if parent_id:
            tags[PARENT] = parent_id
        return self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    def log_params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def end_run(self, run_id: str, outcome: str, reason: str | None = None, *,
                metrics: dict[str, float] | None = None, tags: dict[str, str] | None = None) -> None:
        """Record the outcome (with the run's last metrics and tags, in one write) and close the run."""
        from mlflow.entities import Metric, RunTag

        tags = {**(tags or {}), OUTCOME: outcome}
        if reason:
            tags[REASON] = reason[:5000]
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])
        status = {OK: "FINISHED", SKIPPED: "FINISHED", PRUNED: "FINISHED", FAILED: "FAILED",
                  INTERRUPTED: "KILLED"}[outcome]
        self.client.set_terminated(run_id, status)

    # --- what is already recorded --------------------------------------------------------------
    def sweep_runs(self, experiment_id: str, sweep: str, *, parents: bool = False,
                   cell_id: str | None = None) -> list:
        """Every live run of a sweep (or of one of its cells): its cells, or (parents=True) its
        invocations, newest first."""
        # MLflow's filter grammar cannot test a tag's absence, so parents are told apart here.
        query = f"tags.`{SWEEP}` = '{_quote(sweep)}'"
        if cell_id is not None:
            query += f" and tags.`{CELL_ID}` = '{_quote(cell_id)}'"
        runs = self._search(experiment_id, query)
        return [r for r in runs if (PARENT not in r.data.tags) == parents]

    def cell_records(self, experiment_id: str, sweep: str,
                     cell_id: str | None = None) -> dict[str, list[CellRecord]]:
        """The sweep's cell runs by cell_id (only that cell's, when one is given)."""
        records: dict[str, list[CellRecord]] = {}
        for run in self.sweep_runs(experiment_id, sweep, cell_id=cell_id):
            t = run.data.tags
            pid = t.get(PID)
            records.setdefault(t.get(CELL_ID, ""), []).append(CellRecord(
                run.info.run_id, run.info.status, t.get(OUTCOME), t.get(REASON), t.get(HOST),
                int(pid) if pid and pid.isdigit() else None, dict(run.data.metrics)))
        return records

    def reap_stale_runs(self, experiment_id: str) -> int:
        """Close runs left RUNNING by a process of this host that no longer exists (SIGKILL, power
        loss). Runs of live processes and of other hosts are left alone. Returns how many closed."""
        closed = 0
        host = fingerprint()["host"]
        for run in self._search(experiment_id, "attributes.status = 'RUNNING'"):
            t = run.data.tags
            if t.get(HOST) != host or _process_alive(t.get(PID), t.get(PID_START)):
                continue
            self.end_run(run.info.run_id, INTERRUPTED,
                         f"process {t.get(PID)} ended without closing this run (killed or crashed)")
            closed += 1
        return closed

    def _search(self, experiment_id: str, filter_string: str) -> list:
        from mlflow.entities import ViewType

        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string, ViewType.ACTIVE_ONLY,
                                           max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs


def _process_alive(pid: str | None, started: str | None) -> bool:
    if not pid or not pid.isdigit():
        return False
    try:
        proc = psutil.Process(int(pid))
        # A recycled pid belongs to a process that started later than the one that logged.
        return started is None or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return re.sub(r"\s+", " ", line)[:300]
