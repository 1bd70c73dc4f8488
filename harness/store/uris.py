"""Where things are stored: the MLflow tracking URI and the shared database's URL, their defaults,
and how they are shown to a user (never with a password)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from harness.errors import UserError
from harness.folders import MLRUNS_DIR

DEFAULT_TRACKING_URI = f"sqlite:///{MLRUNS_DIR / 'mlflow.db'}"
SHARED_DB_NAME = "optuna.db"  # Optuna's study tables and the harness's claims table, beside the MLflow store


def resolve_tracking_uri(cli_value: str | None = None) -> str:
    """--tracking-uri wins, then MLFLOW_TRACKING_URI, then the embedded SQLite store under mlruns/."""
    return _given(cli_value, "--tracking-uri", "MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def resolve_db_url(cli_value: str | None, tracking_uri: str) -> str:
    """--storage wins, then HARNESS_STORAGE, then SQLite next to a SQLite MLflow store, named after
    it (under the project's mlruns/ for any other store)."""
    given = _given(cli_value, "--storage", "HARNESS_STORAGE")
    if given:
        return given
    if tracking_uri.startswith("sqlite:///"):
        return f"sqlite:///{shared_db_beside(Path(tracking_uri.removeprefix('sqlite:///')))}"
    return f"sqlite:///{MLRUNS_DIR / SHARED_DB_NAME}"


@dataclass(frozen=True)
class StoreLocations:
    """Where one command keeps its records: the MLflow tracking URI and the shared database's URL
    (claims, studies). The command line resolves them once, here, and hands the pair on as it is:
    to the Store, the engines, and (through store_environment) every worker it starts, which reads
    them back as given."""
    tracking_uri: str
    db_url: str

    @classmethod
    def resolve(cls, tracking_uri: str | None = None, storage: str | None = None) -> "StoreLocations":
        """--tracking-uri and --storage (None: not given), then the environment, then the defaults."""
        uri = resolve_tracking_uri(tracking_uri)
        return cls(uri, resolve_db_url(storage, uri))


def shared_db_beside(store: Path) -> Path:
    """The claims and studies file of the SQLite store `store`: `optuna.db` beside `mlflow.db` (the
    default store, and every store made before stores were told apart), `<stem>-optuna.db` beside
    any other, so two stores in one folder never share claims or studies."""
    name = SHARED_DB_NAME if store.stem == "mlflow" else f"{store.stem}-{SHARED_DB_NAME}"
    return store.parent / name


def _given(cli_value: str | None, option: str, variable: str) -> str | None:
    """The option's value, else the environment variable's; an empty one is a mistake, never a
    silent fall-back to the project's own store."""
    for name, value in ((option, cli_value), (variable, os.environ.get(variable))):
        if value is not None:
            if not value.strip():
                raise UserError(f"{name} is empty; give a store location (sqlite:///path/mlflow.db, "
                                f"postgresql://..., http://host:5000) or omit it for the default.")
            return value
    return None


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


def sqlite_path(url: str) -> Path | None:
    """The file of a sqlite:/// URL; None for any other store."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def check_sqlite_path(url: str, what: str) -> None:
    """One sentence, before any folder or lock is made, for a SQLite path SQLAlchemy would not open
    as written: after '?' it reads URL options (the store would be another file), and '%' starts an
    escape that MLflow and SQLAlchemy decode differently."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else None
    for char in "?%":
        if path is not None and char in path:
            raise UserError(f"{what} path {path} holds '{char}', which a SQLite URL cannot carry as written "
                            "(the store would open another file); use a path without '?' and '%'.")


def redact(uri: str) -> str:
    """The URI with any password replaced: the one form in which a store location is printed or
    written (messages, banners, run descriptions, reports)."""
    try:
        parts = urlsplit(uri)
        password = parts.password
    except ValueError:  # not a URL urllib can split (a bad port, say): hide whatever looks like one
        return hide_passwords(uri)
    if password:
        user, _, host = parts.netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


# scheme://user:password@ anywhere in a text (a driver's message that quotes its URL, a traceback).
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")


def hide_passwords(text: str) -> str:
    """`text` with the password of every URL in it replaced."""
    return _USERINFO.sub(r"\1***@", text)


def hide_password(text: str, url: str) -> str:
    """`text` (a driver's error message, say) with the URL's password replaced, quoted or not."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = hide_passwords(text)
    if password:
        for form in {password, unquote(password)}:
            text = text.replace(form, "***")
    return text


# The environment variables through which a worker, a server or a Slurm job gets its store
# locations: a command line is visible to every user of the machine (`ps`), an environment is not.
TRACKING_ENV, STORAGE_ENV = "MLFLOW_TRACKING_URI", "HARNESS_STORAGE"


def store_environment(tracking_uri: str, db_url: str | None = None) -> dict[str, str]:
    """The variables that hand a child process these locations (in place of --tracking-uri and
    --storage, which resolve_tracking_uri and resolve_db_url read back)."""
    return {TRACKING_ENV: tracking_uri, **({STORAGE_ENV: db_url} if db_url else {})}
