"""Where results and coordination live: the MLflow store (every run), the shared database (Optuna's
studies and the claims table), and the process identity both use to tell live writers from dead
ones. The store imports nothing above it."""

from harness.store.claims import Claims, new_token
from harness.store.outcome import Outcome
from harness.store.tracking import RunRecord, Store
from harness.store.uris import redact, resolve_db_url, resolve_tracking_uri

__all__ = ["Claims", "Outcome", "RunRecord", "Store", "new_token", "redact", "resolve_db_url",
           "resolve_tracking_uri"]
