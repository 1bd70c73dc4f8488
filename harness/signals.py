"""SIGTERM (a scheduler's stop, `kill`) ends a sweep or study the way Ctrl-C does: the running cell
is closed as interrupted and the parent run says how far it got."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def sigterm_as_interrupt():
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
