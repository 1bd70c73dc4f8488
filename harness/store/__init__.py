"""Where results and coordination live: the MLflow store (every run), the shared database (Optuna's
studies and the claims table), and the process identity both use to tell live writers from dead
ones. The store imports nothing above it.

Its names are imported on first use (PEP 562): the command line reads the light modules (uris,
paths, outcome) to check a user's values before SQLAlchemy and MLflow are loaded, and importing
any of them imports this package first."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.store.claims import Claims, new_token
    from harness.store.outcome import Outcome
    from harness.store.tracking import RunRecord, Store
    from harness.store.uris import redact, resolve_db_url, resolve_tracking_uri

_HOMES = {"Claims": "claims", "new_token": "claims", "Outcome": "outcome", "RunRecord": "tracking",
          "Store": "tracking", "redact": "uris", "resolve_db_url": "uris", "resolve_tracking_uri": "uris"}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'harness.store' has no attribute '{name}'")
    return getattr(importlib.import_module(f"harness.store.{_HOMES[name]}"), name)
