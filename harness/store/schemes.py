"""What a store location can name, checked from its text alone, before MLflow, SQLAlchemy or Optuna
is imported: an unknown scheme, or a database whose Python driver is not installed, is one sentence
at once. MLflow answered an unknown scheme after 3-4 s of imports with a sentence it cut short, and
a `--storage mysql://...` without its driver was told after 9 s, once the study had opened (and
made) the tracking store.

Whether the location is reachable or writable is the probe's question (store/probe.py), asked when
the store is opened."""

from __future__ import annotations

import importlib.util

from harness.errors import UserError
from harness.store.uris import redact

# The schemes MLflow stores runs under (its own list, less the plain-file forms it has deprecated).
TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc", "uc")
# The databases the shared database (claims, Optuna's studies) may be: SQLAlchemy URLs Optuna takes.
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")
TRACKING_FORMS = "sqlite:///path/mlflow.db, postgresql://user@host/db or http(s)://host:5000"
STORAGE_FORMS = "sqlite:///path.db (one machine) or postgresql://user@host/db (several machines)"

# The module SQLAlchemy imports for each database and driver ("" = the dialect's default driver,
# SQLAlchemy 2.1's). A driver not listed here is left to SQLAlchemy to find or refuse.
DRIVER_MODULES = {
    ("postgresql", ""): "psycopg", ("postgresql", "psycopg"): "psycopg", ("postgresql", "psycopg2"): "psycopg2",
    ("postgresql", "pg8000"): "pg8000",
    ("mysql", ""): "MySQLdb", ("mysql", "mysqldb"): "MySQLdb", ("mysql", "pymysql"): "pymysql",
    ("mysql", "mysqlconnector"): "mysql.connector",
    ("mssql", ""): "pyodbc", ("mssql", "pyodbc"): "pyodbc", ("mssql", "pymssql"): "pymssql",
}


def scheme_of(url: str) -> tuple[str, str]:
    """(database or protocol, driver) of a URL: ("postgresql", "psycopg2") for postgresql+psycopg2://;
    ("", "") for text with no scheme (a plain path)."""
    head, sep, _ = url.partition(":")
    if not sep or not head or not head.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return "", ""
    database, _, driver = head.lower().partition("+")
    return database, driver


def check_tracking_uri(uri: str) -> None:
    """One sentence for a tracking URI MLflow cannot store runs under, or whose driver is missing."""
    database, _ = scheme_of(uri)
    if database in ("", "file") or "://" not in uri:
        raise UserError(f"tracking URI {redact(uri)} is a plain-file store, which MLflow has deprecated; use "
                        f"{TRACKING_FORMS}.")
    if database not in TRACKING_SCHEMES:
        raise UserError(f"tracking URI {redact(uri)} has the scheme '{database}', which MLflow stores no runs "
                        f"under; use {TRACKING_FORMS}.")
    check_driver(uri, "the tracking store")


def check_storage_url(url: str) -> None:
    """One sentence for a shared-database URL that is not a database Optuna takes, or whose driver
    is missing."""
    database, _ = scheme_of(url)
    if database not in STORAGE_SCHEMES or "://" not in url:
        raise UserError(f"shared database {redact(url)} is not a database URL; use {STORAGE_FORMS}.")
    check_driver(url, "the shared database")


def check_driver(url: str, what: str) -> None:
    """The Python driver of a database URL is installed (asked of the import system, not imported)."""
    module = DRIVER_MODULES.get(scheme_of(url))
    if module is None or _installed(module):
        return
    raise UserError(f"{what} {redact(url)} needs the Python driver '{module}', which is not installed; "
                    "`make install` installs psycopg for PostgreSQL.")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:   # "mysql.connector" without its "mysql" package
        return False
