"""The database that several processes share: Optuna's study tables and the claims table.

Default: SQLite beside the MLflow store (`mlruns/optuna.db`), for processes on ONE machine. SQLite
serializes writers; to make that safe for a few worker processes every SQLite connection the
process opens (Optuna's, MLflow's, the claims') gets a long busy timeout and write-ahead logging,
so a writer waits its turn instead of failing with "database is locked". Several machines need a
server database: `postgresql://user:password@host/db`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.store.probe import check_server, check_sqlite
from harness.store.schemes import check_storage_url
from harness.store.uris import check_sqlite_path, is_sqlite

BUSY_TIMEOUT_MS = 120_000
_installed = False


def patient_sqlite() -> None:
    """Every SQLite connection opened through SQLAlchemy in this process waits up to two minutes
    for a lock and uses WAL (readers never block the one writer). Idempotent."""
    global _installed
    if _installed:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _on_connect(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            try:
                cursor.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:  # another process is switching it right now: it ends WAL
                pass
            # With WAL, NORMAL syncs at checkpoints instead of every commit: a crash cannot corrupt
            # the file, and a power cut can at worst lose the last cells, which the sweep reruns.
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()

    _installed = True


def settle_sqlite(path: Path) -> str | None:
    """Fold a SQLite file's write-ahead log into it and leave it in rollback-journal mode
    (journal_mode = DELETE), as a store meant to be committed must be: a WAL file makes even a
    read-only open write -wal and -shm files beside it, and a copy of the file alone may miss the
    log. The mode it is left in ("delete"; "wal" when another connection holds it open), or None when
    there is no such file. The next harness command to open it for writing switches it back to WAL."""
    if not path.is_file():
        return None
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return str(connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0]).lower()
    except sqlite3.OperationalError:   # another process writes to it now: left as it is
        return "wal"
    finally:
        connection.close()


def engine_kwargs(url: str) -> dict:
    if url.startswith("postgresql"):
        # Fail in seconds on a wrong host instead of waiting for the OS's TCP timeout.
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    return {}


def create_engine(url: str):
    """A SQLAlchemy engine on the shared database, patient with SQLite's single writer."""
    import sqlalchemy

    if is_sqlite(url):
        patient_sqlite()
    return sqlalchemy.create_engine(url, **engine_kwargs(url))


def check_url(url: str) -> None:
    """One sentence (password hidden) when the URL cannot be used, before anything is created: a
    SQLite file must be readable, writable and a database; a server must answer within seconds."""
    if is_sqlite(url):
        check_sqlite_path(url, "the shared database")
        path = url.removeprefix("sqlite:///")
        if path and path != url:
            check_sqlite(Path(path), f"the shared database {url}")
        return
    check_storage_url(url)
    check_server(url, "the shared database", create_engine)
