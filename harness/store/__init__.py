"""Where results and coordination live: the MLflow store (every run), the shared database (Optuna's
studies and the claims table), and the process identity both use to tell live writers from dead
ones. The store imports nothing above it.

The names below load on first use (PEP 562), so that a module needing one small part of the store
(store.paths, to check a file's name) does not import MLflow and torch with the package."""

import importlib

_WHERE = {"Claims": "claims", "new_token": "claims", "Outcome": "outcome", "RunRecord": "tracking",
          "Store": "tracking", "redact": "uris", "resolve_db_url": "uris", "resolve_tracking_uri": "uris"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
