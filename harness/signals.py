"""SIGTERM (a scheduler's stop, `kill`) ends a sweep or study the way Ctrl-C does: the running cell
is closed as interrupted and the parent run says how far it got.

A stop is also remembered, not only raised. Python runs a signal handler between any two bytecodes,
and a KeyboardInterrupt raised while a weakref callback or a `__del__` runs (the garbage collector
freeing an SQLAlchemy mapper, say) is printed as "Exception ignored" and lost: a worker would then
go on through the whole grid after its launcher told it to stop. `raise_if_stopped()`, called
before each cell and after each epoch, raises it again there."""

from __future__ import annotations

import contextlib
import signal
import threading

_stopped_by: str | None = None   # the signal that asked this process to stop, once one has


@contextlib.contextmanager
def sigterm_as_interrupt():
    global _stopped_by
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    _stopped_by = None
    previous = {s: signal.signal(s, _raise_keyboard_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stopped_by = None   # handled by now: a later command in this process starts afresh


def raise_if_stopped() -> None:
    """KeyboardInterrupt when a stop signal came and its first KeyboardInterrupt was swallowed."""
    if _stopped_by is not None:
        raise KeyboardInterrupt(_stopped_by)


def _raise_keyboard_interrupt(signum, frame):
    global _stopped_by
    _stopped_by = f"signal {signum}"
    raise KeyboardInterrupt(_stopped_by)
