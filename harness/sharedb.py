"""The database that several workers share: the Optuna study storage and the claims table.

Default: SQLite beside the MLflow store (`mlruns/optuna.db`), for workers on ONE machine. SQLite
serializes writers; to make that safe for a few worker processes every SQLite connection the
process opens (Optuna's, MLflow's, the claims') gets a long busy timeout and write-ahead logging,
so a writer waits its turn instead of failing with "database is locked". Several machines need a
server database: `postgresql://user:password@host/db`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.errors import UserError
from harness.fingerprint import REPO_ROOT
from harness.tracking import _first_line, redact

BUSY_TIMEOUT_MS = 120_000
_installed = False


def default_url(tracking_uri: str) -> str:
    """SQLite next to a SQLite MLflow store; under the project's mlruns/ otherwise."""
    if tracking_uri.startswith("sqlite:///"):
        return f"sqlite:///{Path(tracking_uri.removeprefix('sqlite:///')).parent / 'optuna.db'}"
    return f"sqlite:///{REPO_ROOT / 'mlruns' / 'optuna.db'}"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


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


def engine_kwargs(url: str) -> dict:
    if url.startswith("postgresql"):
        # Fail in seconds on a wrong host instead of waiting for the OS's TCP timeout.
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    return {}


def check_url(url: str) -> None:
    """One sentence (password hidden) when the URL cannot be used, before anything is created."""
    if is_sqlite(url):
        path = url.removeprefix("sqlite:///")
        if path and path != url:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UserError(f"cannot create the folder of the study storage {url}: {err.strerror}.") from None
        return
    if not url.startswith(("postgresql", "mysql")):
        raise UserError(f"study storage {redact(url)} is not a database URL; use sqlite:///path.db "
                        "(one machine) or postgresql://user:password@host/db (several machines).")
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, **engine_kwargs(url))
        with engine.connect():
            pass
        engine.dispose()
    except ModuleNotFoundError as err:
        raise UserError(f"study storage {redact(url)} needs the Python driver '{err.name}', which is not "
                        "installed; `make install` installs psycopg for PostgreSQL.") from None
    except Exception as err:  # any connect failure: name the URL, never its password
        raise UserError(f"cannot reach the study storage {redact(url)}: {hide_password(_first_line(err), url)}") from None


def hide_password(text: str, url: str) -> str:
    from urllib.parse import urlsplit

    password = urlsplit(url).password
    return text.replace(password, "***") if password else text
