"""A store that stops taking reads or writes half-way (disk full, file made read-only, server
gone) raises one kind of exception, StoreFault, with one sentence: what refused, doing what, and
the first line of the library's message. The engines close what they can and stop; the CLI prints
the sentence."""

from __future__ import annotations

import functools
from typing import Any

from harness.errors import StoreFault, first_line

# What each client call does, in the words of the sentence; other calls are named as they are.
_ACTIONS = {
    "create_run": "start a run", "log_batch": "record params, metrics or tags", "set_terminated": "close a run",
    "log_artifact": "store an artifact", "log_text": "store an artifact", "log_dict": "store an artifact",
    "search_runs": "search runs", "delete_run": "delete a run", "update_run": "reopen a run",
}


class _Guarded:
    """`target` with every method call's failure turned into a StoreFault naming `what`."""

    def __init__(self, target: Any, what: str):
        self._target, self._what = target, what

    def __getattr__(self, name: str):
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute
        return refused_as_fault(self._what, _ACTIONS.get(name, name.replace("_", " ")))(attribute)


def guarded(target: Any, what: str) -> Any:
    return _Guarded(target, what)


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
