"""A store that stops taking reads or writes half-way (disk full, file made read-only, server
gone) raises one kind of exception, StoreFault, with one sentence: what refused, doing what, and
the first line of the library's message. The engines close what they can and stop; the CLI prints
the sentence."""

from __future__ import annotations

import functools
from typing import Any

from harness.errors import StoreFault, first_line
from harness.signals import stops_held

# What each client call does, in the words of the sentence; other calls are named as they are.
_ACTIONS = {
    "create_run": "start a run", "log_batch": "record params, metrics or tags", "set_terminated": "close a run",
    "log_artifact": "store an artifact", "log_text": "store an artifact", "log_dict": "store an artifact",
    "search_runs": "search runs", "delete_run": "delete a run", "update_run": "reopen a run",
}


class _Guarded:
    """`target` with every method call's failure turned into a StoreFault naming `what`. With
    `hold_stops` (a database the process writes through SQLAlchemy), no stop signal is raised
    inside a call either: a KeyboardInterrupt in the middle of SQLAlchemy's commit or
    its return of a connection to the pool can leave a SQLite write transaction open in this
    process, and every later write (the one that closes the cut run too) then waits on it until
    MLflow's 20 s busy timeout refuses it. A stop that comes during a call is raised at the next
    `raise_if_stopped()` (after each epoch, before each cell). A tracking server is left
    interruptible: a request to one holds no lock here, and Ctrl-C must end its retries."""

    def __init__(self, target: Any, what: str, hold_stops: bool):
        self._target, self._what, self._hold_stops = target, what, hold_stops

    def __getattr__(self, name: str):
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute
        refused = refused_as_fault(self._what, _ACTIONS.get(name, name.replace("_", " ")))(attribute)
        if not self._hold_stops:
            return refused

        def uncut(*args, **kwargs):
            with stops_held():
                return refused(*args, **kwargs)
        return uncut


def guarded(target: Any, what: str, *, hold_stops: bool = False) -> Any:
    return _Guarded(target, what, hold_stops)


def refused_as_fault(what: str, action: str):
    """A method decorator: any failure of the method becomes a StoreFault ("`what` refused to
    `action`: ...")."""
    def decorate(method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except StoreFault:
                raise
            except Exception as err:
                raise StoreFault(f"{what} refused to {action}: {first_line(err)}") from err
        return call
    return decorate
