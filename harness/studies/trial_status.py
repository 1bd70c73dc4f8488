"""A study trial's state as the harness counts and prints it: what the engine returns for each
trial it ran, and what the report counts. Its own module, so the engine names the states without
importing the report (and pandas with it)."""

from __future__ import annotations

from enum import StrEnum


class TrialStatus(StrEnum):
    """Optuna's TrialState names, lower case."""
    COMPLETE = "complete"   # told its objective values
    PRUNED = "pruned"       # stopped early by the pruner; counts as finished
    FAIL = "fail"           # failed (its slot goes to the next trial)
    RUNNING = "running"
    WAITING = "waiting"     # queued (a baseline, a dead worker's trial asked again)
