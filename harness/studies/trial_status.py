"""A study trial's state as the harness counts and prints it: what the engine returns for each
trial it ran, and what the report counts. Its own module, so the engine names the states without
importing the report (and pandas with it).

Two of them are not Optuna's: a trial cut off by Ctrl-C, a kill or a dead worker is FAIL in Optuna
(so it never runs on), but it did not fail: it is INTERRUPTED, and the trial queued with its
parameters is REQUEUED while it waits to run. That queued trial takes the study's next number,
which is why a study's trial numbers skip (0, 2): the report names each pair."""

from __future__ import annotations

from enum import StrEnum

# Trial user attributes: the trial whose parameters a queued trial runs again (set on the queued one),
# and a cut-off trial's own mark (set while it still runs, so one not queued again is told apart too).
RETRY_OF = "harness.retry_of"
INTERRUPTED_ATTR = "harness.interrupted"


class TrialStatus(StrEnum):
    """Optuna's TrialState names, lower case, and the two the harness tells apart within them."""
    COMPLETE = "complete"   # told its objective values
    PRUNED = "pruned"       # stopped early by the pruner; counts as finished
    FAIL = "fail"           # failed (its slot goes to the next trial)
    RUNNING = "running"
    WAITING = "waiting"     # queued (a baseline)
    INTERRUPTED = "interrupted"   # cut off (Ctrl-C, a kill, its worker died); Optuna's FAIL
    REQUEUED = "requeued"         # queued to run an interrupted trial's parameters again; Optuna's WAITING


def statuses(trials) -> dict[int, TrialStatus]:
    """Each trial's status by number (Optuna's FrozenTrials)."""
    retried = {int(t.user_attrs[RETRY_OF]) for t in trials if RETRY_OF in t.user_attrs}
    found = {}
    for t in trials:
        status = TrialStatus(t.state.name.lower())
        if status == TrialStatus.FAIL and (t.number in retried or t.user_attrs.get(INTERRUPTED_ATTR)):
            status = TrialStatus.INTERRUPTED
        elif status == TrialStatus.WAITING and RETRY_OF in t.user_attrs:
            status = TrialStatus.REQUEUED
        found[t.number] = status
    return found


def count(trials) -> dict[TrialStatus, int]:
    """How many trials have each status (every status named, 0 included)."""
    found = list(statuses(trials).values())
    return {s: found.count(s) for s in TrialStatus}


def requeues(trials) -> list[tuple[int, int | None, TrialStatus | None]]:
    """Each interrupted trial's number, the trial that runs its parameters again (None: not queued
    again, its retries spent) and that trial's status, in the order they were made."""
    status = statuses(trials)
    again = {int(t.user_attrs[RETRY_OF]): t.number for t in trials if RETRY_OF in t.user_attrs}
    return [(number, again.get(number), status.get(again.get(number)))
            for number in sorted(status) if status[number] == TrialStatus.INTERRUPTED]
