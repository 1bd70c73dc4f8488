"""The one door to MLflow: every run the harness creates, logs, closes or reads goes through
`Store`. Nothing else in the harness imports MLflow's client.

Layout in the store: one MLflow experiment per sweep or study (or per experiment for single runs);
each invocation is a parent run; each cell is a child run whose `harness.cell_id` tag identifies the
resolved config. The engines read these tags back to decide what is already done.
"""

from __future__ import annotations

import contextlib
import gc
import fcntl
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from harness.errors import StoreFault, StoreGone, UserError, first_line
from harness.signals import stops_held
from harness.store import probe, shared_db
from harness.store.faults import guarded
from harness.store.outcome import Outcome
from harness.store.paths import inside
from harness.store.process import process_alive, this_process
from harness.store.relocate import follow_moved_folder
from harness.store.uris import check_sqlite_path, is_sqlite, redact, resolve_tracking_uri, shared_db_beside

# Tag names the harness writes and reads back.
SWEEP, SCALE, CELL_ID, OUTCOME, REASON, HOST, PID, PID_START, PARENT, CLOCK, KIND = (
    "harness.sweep", "harness.scale", "harness.cell_id", "harness.outcome", "harness.reason",
    "harness.host", "harness.pid", "harness.pid_start", "mlflow.parentRunId", "harness.clock", "harness.kind",
)
PROCEDURE = "harness.procedure"   # MEASUREMENT_PROCEDURE of the cell (from 4 on: round r trains seed base + r)
DETACHED_HOST = "(detached workers)"  # HOST of a parent run whose launcher left; its workers close it
DESCRIPTION = "mlflow.note.content"  # what the MLflow UI shows as an experiment's or a run's description
NOTE_PREFIX = "harness.note."  # + key: a text value an experiment returned (a captured warning, a dtype)
REASON_LIMIT = 5000            # MLflow caps a tag value; a long traceback goes in an artifact instead
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")  # database servers MLflow stores runs in directly
# MLflow's client settings (mlflow/environment_variables.py), set in this process and so in its workers.
# Its "View run at URL" lines would put the server's URL (a password too) on stdout, among the
# harness's own lines; and its default 7 retries with doubling back-off leave a killed tracking server
# unnamed for minutes: 2 retries, 1 s back-off and 10 s per request name it within about 30 s.
MLFLOW_DEFAULTS = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                   "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# MLflow's caps on an experiment's and a run's tag values (mlflow/utils/validation.py).
EXPERIMENT_TAG_LIMIT, RUN_TAG_LIMIT = 20000, 8000
# Test hook: the path of an empty SQLite store this code built once (tests/conftest.py). A new SQLite
# store is then a copy of it instead of MLflow's 69 schema migrations, which take a second or more
# on a small machine and ran again for every test's fresh store. Unset for any real use.
EMPTY_STORE_ENV = "HARNESS_TEST_EMPTY_STORE"


@dataclass
class RunRecord:
    """A run as the harness reads it back: what MLflow holds, without MLflow's classes."""
    run_id: str
    name: str
    status: str                 # RUNNING | FINISHED | FAILED | KILLED
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    start_time: int             # ms since the epoch

    @property
    def outcome(self) -> str | None:
        return self.tags.get(OUTCOME)

    @property
    def reason(self) -> str | None:
        return self.tags.get(REASON)

    @property
    def is_parent(self) -> bool:
        return PARENT not in self.tags

    @property
    def finished_ok(self) -> bool:
        return self.status == "FINISHED" and self.outcome == Outcome.OK


class Store:
    """An open, reachable MLflow store."""

    def __init__(self, uri: str | None = None):
        from mlflow.tracking import MlflowClient

        _quiet_mlflow_logs()
        self.uri = resolve_tracking_uri(uri)
        self.artifact_root = self._artifact_root()
        self._probe()
        if is_sqlite(self.uri):
            shared_db.patient_sqlite()  # WAL: the UI and other workers read while a sweep writes
        try:
            with self._creation_lock():
                self._create_sqlite_whole()
                if self.artifact_root is not None:
                    follow_moved_folder(self._sqlite_path(), self.artifact_root)
                # Every call through the client that fails becomes one StoreFault sentence.
                self._client = guarded(MlflowClient(tracking_uri=self.uri), f"the tracking store {redact(self.uri)}",
                                       hold_stops=not self.uri.startswith(("http:", "https:")))
                self._client.search_experiments(max_results=1)
            self._identity = self._file_identity()
        except UserError:
            raise
        except Exception as err:  # any failure here means the store is not usable as given
            cause = err.__cause__ if isinstance(err, StoreFault) and err.__cause__ else err
            raise UserError(f"cannot open the tracking store {redact(self.uri)}: {first_line(cause)}") from None

    def _creation_lock(self):
        """Several workers opening a new SQLite store at once would race through MLflow's schema
        migrations ("duplicate column"); one at a time, the later ones find it made."""
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
            check_sqlite_path(self.uri, "the tracking store")  # before its folder and lock are made
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
        """Fail in seconds, with one sentence, on a store that cannot be used: an unreachable server
        or database, a corrupt or read-only SQLite file (MLflow would retry for minutes, or fail
        only at the first write)."""
        shown = f"the tracking store {redact(self.uri)}"
        if self.uri.startswith(("http://", "https://")):
            import requests

            try:
                requests.get(self.uri.rstrip("/") + "/health", timeout=5).raise_for_status()
            except requests.RequestException as err:
                raise UserError(f"cannot reach the MLflow tracking server at {redact(self.uri)} "
                                f"({type(err).__name__}); start it or pass another --tracking-uri.") from None
        elif self.artifact_root is not None:
            probe.check_sqlite(self._sqlite_path(), shown)
            probe.check_folder_writable(self.artifact_root, f"the artifacts folder of {shown}")
        elif self.uri.split(":", 1)[0].split("+")[0] in DATABASE_SCHEMES:
            probe.check_server(self.uri, "the tracking store", shared_db.create_engine)

    def _sqlite_path(self) -> Path:
        return Path(self.uri.removeprefix("sqlite:///"))

    def settle_for_commit(self) -> dict[str, str]:
        """A SQLite store (its mlflow.db and the claims and studies file beside it) left as a commit
        should hold it: each write-ahead log folded in and the files in rollback-journal mode (harness/
        store/shared_db.py). This process's MLflow connections to it are closed first, since a file
        another connection holds open stays in WAL. Each file's mode, by name; empty for a server store."""
        if self.artifact_root is None or not self.uri.startswith("sqlite:///"):
            return {}
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        for uri in [u for u in SqlAlchemyStore._engine_map if u == self.uri or u.startswith(self.uri + "?")]:
            SqlAlchemyStore._engine_map.pop(uri).dispose()
        gc.collect()   # a connection an unreferenced result still held closes only when collected
        path = self._sqlite_path()
        found = {p.name: shared_db.settle_sqlite(p) for p in (path, shared_db_beside(path))}
        return {name: mode for name, mode in found.items() if mode is not None}

    def _create_sqlite_whole(self) -> None:
        """A new SQLite store is built and migrated beside its path, then renamed into place."""
        path = self._sqlite_path() if self.artifact_root is not None else None
        if path is None or (path.exists() and path.stat().st_size > 0):  # an empty file is no store yet
            return

        def build(temporary: Path) -> None:
            if os.environ.get(EMPTY_STORE_ENV):
                self._copy_empty_store(Path(os.environ[EMPTY_STORE_ENV]), temporary)
                return
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            uri = f"sqlite:///{temporary}"
            try:
                SqlAlchemyStore(uri, self.artifact_root.resolve().as_uri())
            finally:
                # MLflow keeps one engine per URI for the life of the process; this one's file moves.
                engine = SqlAlchemyStore._engine_map.pop(uri, None)
                if engine is not None:
                    engine.dispose()

        probe.create_sqlite_whole(path, f"the tracking store {redact(self.uri)}", build)

    def _copy_empty_store(self, template: Path, temporary: Path) -> None:
        """The test hook's store (EMPTY_STORE_ENV): the template's pages copied through SQLite (whatever
        its journal holds), and MLflow's Default experiment pointed at this store's artifacts folder, as
        the migrations would have left it. A template that is not there fails the creation."""
        from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

        default = append_to_uri_path(resolve_uri_if_local(self.artifact_root.resolve().as_uri()), "0")
        read_only = f"{template.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(read_only, uri=True)) as source, \
                contextlib.closing(sqlite3.connect(temporary)) as copy:
            source.backup(copy)
            copy.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0", (default,))
            copy.commit()

    def _file_identity(self) -> tuple[int, int] | None:
        """A SQLite store's (device, inode): the file this process writes through its open handles,
        which a deleted or replaced path no longer names. None for a server store, or no file."""
        if self.artifact_root is None:
            return None
        try:
            found = os.stat(self._sqlite_path())
        except FileNotFoundError:
            return None
        return found.st_dev, found.st_ino

    def check_still_there(self) -> None:
        """StoreGone when the SQLite file this store opened was deleted or replaced since: SQLite
        goes on writing into the unlinked file, so every record after that is lost at exit."""
        if self.artifact_root is None:
            return
        now = self._file_identity()
        if now != self._identity:
            what = "was deleted" if now is None else "was replaced by another file"
            raise StoreGone(f"the tracking store {self._sqlite_path()} {what} while this ran; the runs logged "
                            "since went with the old file and are not kept, so nothing more is run or reported "
                            "(restore the file, or run the same command again to start a new store)")

    def close_after_fault(self, run_id: str, outcome: Outcome, reason: str,
                          tags: dict[str, object] | None = None) -> bool:
        """Close a run after a fault (the store refused a write, Ctrl-C): the whole record when the
        store takes it (again after making room), else the status alone (one small update can fit
        where a batch of tags does not). False when it takes neither; the next invocation then
        closes the run as interrupted (reap_stale_runs). A stop signal meanwhile (the same stop sent
        again) waits until the run is closed: raised in the middle, it would leave the run RUNNING."""
        def whole() -> None:
            self.end_run(run_id, outcome, reason, tags=tags)

        def status_alone() -> None:
            self._client.set_terminated(run_id, Outcome(outcome).mlflow_status)

        with stops_held():
            for close in (whole, whole, status_alone):
                try:
                    close()
                    return True
                except StoreFault:
                    self._make_room()
        return False

    def _make_room(self) -> None:
        """On a full disk, fold a SQLite store's write-ahead log into the file and truncate it: the
        log only grows between checkpoints, and its space is what a last small write needs."""
        if self.artifact_root is None:
            return
        try:
            connection = sqlite3.connect(self._sqlite_path(), timeout=5)
            try:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                connection.close()
        except sqlite3.Error:
            pass  # nothing more to try; the caller reports what stayed open

    # --- experiments ------------------------------------------------------------------------------
    def find_experiment(self, name: str) -> str | None:
        """The id of a live experiment with this name, or None; creates nothing."""
        found = self._client.get_experiment_by_name(name)
        return found.experiment_id if found is not None and found.lifecycle_stage != "deleted" else None

    def experiment_id(self, name: str) -> str:
        """The experiment's id, created (or restored from the bin) when needed. Its artifacts folder
        must take files: found now, not at the first cell's config.json."""
        found = self._client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self._client.restore_experiment(found.experiment_id)
            self._check_artifact_location(found.artifact_location)
            return found.experiment_id
        # inside(): an experiment's name never places its artifacts outside the store's folder.
        location = inside(self.artifact_root, name).resolve().as_uri() if self.artifact_root else None
        self._check_artifact_location(location)
        try:
            # The kind tag makes the MLflow UI open on the runs table (model development), not
            # on its GenAI traces overview.
            return self._client.create_experiment(name, artifact_location=location,
                                                  tags={"mlflow.experimentKind": "custom_model_development"})
        except Exception:  # created by a concurrent process in the meantime
            found = self._client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def describe_experiment(self, experiment_id: str, markdown: str) -> None:
        """The experiment's description, the Markdown the UI shows on its overview."""
        self._client.set_experiment_tag(experiment_id, DESCRIPTION, _fit(markdown, EXPERIMENT_TAG_LIMIT))

    def experiment_description(self, experiment_id: str) -> str:
        return self._client.get_experiment(experiment_id).tags.get(DESCRIPTION, "")

    def tag_experiment(self, experiment_id: str, key: str, value: str) -> None:
        """One tag of the experiment (the UI reads some: a saved view of its runs table)."""
        self._client.set_experiment_tag(experiment_id, key, value)

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(self._client.get_experiment(experiment_id).tags)

    def experiments(self) -> list[tuple[str, str]]:
        """(id, name) of every live experiment but MLflow's empty "Default", last updated first."""
        found = self._client.search_experiments(order_by=["last_update_time DESC"], max_results=1000)
        return [(e.experiment_id, e.name) for e in found if not (e.name == "Default" and e.experiment_id == "0")]

    def _check_artifact_location(self, location: str | None) -> None:
        if location and location.startswith("file:"):
            folder = Path(unquote(urlsplit(location).path))
            probe.check_folder_writable(folder, f"the artifacts folder of the tracking store {redact(self.uri)}")

    # --- writing runs -----------------------------------------------------------------------------
    def start_run(self, experiment_id: str, name: str, tags: dict[str, str],
                  parent_id: str | None = None) -> str:
        """A new RUNNING run carrying the machine's fingerprint and this process's identity."""
        from harness.machine.fingerprint import fingerprint   # reads torch's build: imported once a run is made

        me, fp = this_process(), fingerprint()
        tags = {**fp, **tags, HOST: me.host, PID: str(me.pid), PID_START: f"{me.started:.2f}",
                "mlflow.source.git.commit": fp["git.commit"]}
        if parent_id:
            tags[PARENT] = parent_id
        return self._client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    def reopen_run(self, run_id: str) -> None:
        """Mark a closed run RUNNING again, owned by this process (a study's parent, resumed). The
        outcome and reason of its last close go: "killed or crashed" must not stay beside the next ok."""
        me = this_process()
        self._client.update_run(run_id, status="RUNNING")
        self.set_tags(run_id, {PID: me.pid, PID_START: f"{me.started:.2f}", HOST: me.host})
        tags = self._client.get_run(run_id).data.tags
        for key in (OUTCOME, REASON):
            if key in tags:
                self._client.delete_tag(run_id, key)

    def log_params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        self._client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def set_tags(self, run_id: str, tags: dict[str, object]) -> None:
        from mlflow.entities import RunTag

        self._client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def describe_run(self, run_id: str, markdown: str) -> None:
        """The run's description (Markdown, shown on its page in the UI)."""
        self.set_tags(run_id, {DESCRIPTION: _fit(markdown, RUN_TAG_LIMIT)})

    def log_dict(self, run_id: str, data: dict, path: str) -> None:
        self._client.log_dict(run_id, data, path)

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self._client.log_text(run_id, text, path)

    def log_artifact(self, run_id: str, local_path: Path | str, folder: str | None = None) -> None:
        self._client.log_artifact(run_id, str(local_path), folder)

    def log_dataset(self, run_id: str, record) -> None:
        """The data a run trained on as an MLflow dataset input (the UI's Dataset column): name,
        digest, source and split sizes (`record`: harness.training.dataset_record.DatasetRecord)."""
        import json

        from mlflow.data.sources import CodeDatasetSource, LocalArtifactDatasetSource
        from mlflow.entities import Dataset, DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        # The entity itself (what mlflow.log_input builds from an mlflow.data dataset): our digest,
        # not one MLflow would compute from the metadata, and the split sizes as its profile.
        source = LocalArtifactDatasetSource(record.source) if record.source_is_path else \
            CodeDatasetSource({"loader": record.source})
        entity = Dataset(record.name, record.digest, source._get_source_type(), source.to_json(),
                         profile=json.dumps(record.profile()))
        inputs = [DatasetInput(entity, [InputTag(MLFLOW_DATASET_CONTEXT, "training")])]
        try:
            self._client.log_inputs(run_id, inputs)
        except Exception as err:
            # Two workers logging the same new dataset at once: MLflow's store inserts it twice and
            # one insert loses on the dataset's unique key. Once it exists, logging it again links it.
            text = str(err).lower()
            if "unique" not in text and "duplicate" not in text:
                raise
            time.sleep(0.2)
            self._client.log_inputs(run_id, inputs)

    @contextlib.contextmanager
    def system_metrics(self, run_id: str, on: bool, interval_s: float):
        """MLflow's own sampler of CPU, memory, disk, network and (with NVIDIA's NVML) GPU use, as
        `system/...` metrics of the run while the block runs. MLflow's environment variable
        MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL overrides the interval."""
        if not on:
            yield
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(run_id, sampling_interval=interval_s, tracking_uri=self.uri)
        monitor.start()
        try:
            yield
        finally:
            monitor.finish()  # flushes the samples taken, before the run is closed

    def end_run(self, run_id: str, outcome: Outcome, reason: str | None = None, *,
                metrics: dict[str, float] | None = None, tags: dict[str, object] | None = None) -> None:
        """Record the outcome (with the run's last metrics and tags, in one write) and close the run."""
        from mlflow.entities import Metric, RunTag

        tags = {**(tags or {}), OUTCOME: Outcome(outcome).value}
        if reason:
            tags[REASON] = reason[:REASON_LIMIT]
        now = int(time.time() * 1000)
        self._client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                               tags=[RunTag(k, str(v)) for k, v in tags.items()])
        self._client.set_terminated(run_id, Outcome(outcome).mlflow_status)

    def delete_run(self, run_id: str) -> None:
        self._client.delete_run(run_id)

    # --- reading runs -----------------------------------------------------------------------------
    def runs(self, experiment_id: str, *, tags: dict[str, str] | None = None, status: str | None = None,
             oldest_first: bool = False) -> list[RunRecord]:
        """Live runs of an experiment whose tags equal `tags` (and status, if given), newest first."""
        clauses = [f"tags.`{k}` = '{_quote(v)}'" for k, v in (tags or {}).items()]
        if status:
            clauses.append(f"attributes.status = '{status}'")
        order = ["attributes.start_time ASC"] if oldest_first else None
        return [_record(r) for r in self._search(experiment_id, " and ".join(clauses), order)]

    def sweep_runs(self, experiment_id: str, sweep: str, *, parents: bool = False,
                   cell_id: str | None = None) -> list[RunRecord]:
        """Every live run of a sweep (or of one of its cells): its cells, or (parents=True) its
        invocations, newest first."""
        # MLflow's filter grammar cannot test a tag's absence, so parents are told apart here.
        tags = {SWEEP: sweep, **({CELL_ID: cell_id} if cell_id is not None else {})}
        return [r for r in self.runs(experiment_id, tags=tags) if r.is_parent == parents]

    def cell_records(self, experiment_id: str, sweep: str,
                     cell_id: str | None = None) -> dict[str, list[RunRecord]]:
        """The sweep's cell runs by cell_id (only that cell's, when one is given)."""
        records: dict[str, list[RunRecord]] = {}
        for run in self.sweep_runs(experiment_id, sweep, cell_id=cell_id):
            records.setdefault(run.tags.get(CELL_ID, ""), []).append(run)
        return records

    def reap_stale_runs(self, experiment_id: str) -> int:
        """Close runs left RUNNING by a process of this host that no longer exists (SIGKILL, power
        loss). Runs of live processes and of other hosts are left alone. Returns how many closed."""
        closed = 0
        host = this_process().host
        for run in self.runs(experiment_id, status="RUNNING"):
            t = run.tags
            if t.get(HOST) != host or process_alive(t.get(PID), t.get(PID_START)):
                continue
            self.end_run(run.run_id, Outcome.INTERRUPTED,
                         f"process {t.get(PID)} ended without closing this run (killed or crashed)")
            closed += 1
        return closed

    def _search(self, experiment_id: str, filter_string: str, order_by: list[str] | None = None) -> list:
        from mlflow.entities import ViewType

        runs, token = [], None
        while True:
            page = self._client.search_runs([experiment_id], filter_string, ViewType.ACTIVE_ONLY,
                                            max_results=1000, order_by=order_by, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs


def _record(run) -> RunRecord:
    return RunRecord(run.info.run_id, run.info.run_name, run.info.status, dict(run.data.params),
                     dict(run.data.metrics), dict(run.data.tags), run.info.start_time)


def _quiet_mlflow_logs() -> None:
    # A new SQLite store runs ~40 schema migrations, each logged at INFO by alembic.
    for name in ("alembic", "mlflow.tracking", "mlflow.system_metrics"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # MLflow logs each database error with its traceback (and each retry) before raising it; the
    # harness says what failed in one sentence (StoreFault, UserError) instead.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # A Ctrl-C or SIGTERM landing inside a query makes SQLAlchemy's pool log "Error closing cursor"
    # with a traceback; the interrupt itself is handled (the run closed) and said in one sentence.
    logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)
    for name, value in MLFLOW_DEFAULTS.items():  # the user's own setting wins
        os.environ.setdefault(name, value)


def _fit(markdown: str, limit: int) -> str:
    """Markdown cut to MLflow's cap on a tag value, saying so, rather than a refused write."""
    if len(markdown) <= limit:
        return markdown
    tail = f"\n\n*(cut here: MLflow keeps at most {limit} characters; the full text is in the report)*\n"
    return markdown[:limit - len(tail)].rsplit("\n", 1)[0] + tail


def _quote(value: str) -> str:
    return value.replace("'", "\\'")
