"""Where things are stored: the MLflow tracking URI and the shared database's URL, their defaults,
and how they are shown to a user (never with a password)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from harness.errors import UserError
from harness.fingerprint import REPO_ROOT

DEFAULT_TRACKING_URI = f"sqlite:///{REPO_ROOT / 'mlruns' / 'mlflow.db'}"
SHARED_DB_NAME = "optuna.db"  # Optuna's study tables and the harness's claims table, beside the MLflow store


def resolve_tracking_uri(cli_value: str | None = None) -> str:
    """--tracking-uri wins, then MLFLOW_TRACKING_URI, then the embedded SQLite store under mlruns/."""
    return _given(cli_value, "--tracking-uri", "MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def resolve_db_url(cli_value: str | None, tracking_uri: str) -> str:
    """--storage wins, then HARNESS_STORAGE, then SQLite next to a SQLite MLflow store (under the
    project's mlruns/ for any other store)."""
    given = _given(cli_value, "--storage", "HARNESS_STORAGE")
    if given:
        return given
    if tracking_uri.startswith("sqlite:///"):
        return f"sqlite:///{Path(tracking_uri.removeprefix('sqlite:///')).parent / SHARED_DB_NAME}"
    return f"sqlite:///{REPO_ROOT / 'mlruns' / SHARED_DB_NAME}"


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


def redact(uri: str) -> str:
    """The URI with any password replaced, for messages."""
    parts = urlsplit(uri)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


def hide_password(text: str, url: str) -> str:
    """`text` (a driver's error message, say) with the URL's password replaced."""
    password = urlsplit(url).password
    return text.replace(password, "***") if password else text
