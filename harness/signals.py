"""SIGTERM (a scheduler's stop, `kill`) ends a sweep or study the way Ctrl-C does: the running cell
is closed as interrupted and the parent run says how far it got.

A stop is also remembered, not only raised. Python runs a signal handler between any two bytecodes,
and a KeyboardInterrupt raised while a weakref callback or a `__del__` runs (the garbage collector
freeing an SQLAlchemy mapper, say) is lost: Python prints it as "Exception ignored" and goes on, and
a worker would go on through the whole grid after its launcher told it to stop. `raise_if_stopped()`,
called before each cell, after each epoch and while a launcher waits for its workers, raises it
again there (within an epoch of the signal); that lost one is not printed.

One stop can come as several signals, and the closing the first one starts must not be cut by the
next: inside `stops_held()` a stop signal is only remembered. A worker's PR_SET_PDEATHSIG fires each
time it is handed to another parent, and a launcher killed with SIGKILL dies thread by thread (its
main thread, the claims heartbeat and the others): each thread's exit hands the worker to the next
live one and sends SIGTERM again, a few milliseconds apart on a loaded machine. A user's second
Ctrl-C, or the launcher passing one on after its grace period, is the same. A second
KeyboardInterrupt raised inside the store writes that close the cut run left it RUNNING."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

_stopped_by: str | None = None   # the signal that asked this process to stop, once one has
_held = 0                        # how many `stops_held()` blocks the main thread is inside
_CUT_OFF = "cut off: "           # a note on the stop itself, naming the cell it cut short


def note_cut_off(stop: BaseException, label: str) -> None:
    """Record on the stop (a KeyboardInterrupt on its way out) that it cut the cell `label` short,
    so the line the command line ends with says which one reruns, and says so only then."""
    stop.add_note(_CUT_OFF + label)


def cut_off(stop: BaseException) -> list[str]:
    """The cells `stop` cut short (note_cut_off), in the order it left them."""
    return [note.removeprefix(_CUT_OFF) for note in getattr(stop, "__notes__", ()) if note.startswith(_CUT_OFF)]


@contextlib.contextmanager
def sigterm_as_interrupt():
    global _stopped_by
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    _stopped_by = None
    previous = {s: signal.signal(s, _raise_keyboard_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_about_lost_stops(sys.unraisablehook)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = previous_hook
        _stopped_by = None   # handled by now: a later command in this process starts afresh


@contextlib.contextmanager
def stops_held():
    """A block no stop signal cuts: one that comes meanwhile is remembered, not raised, and
    `raise_if_stopped()` raises it after the block (where the caller checks, or at the next cell or
    epoch). For the few store writes that open or close a run, which a KeyboardInterrupt in their
    middle would leave RUNNING. A no-op outside the main thread, where no handler runs."""
    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1


def raise_if_stopped() -> None:
    """KeyboardInterrupt when a stop signal came and its first KeyboardInterrupt was swallowed (or
    held, by `stops_held`)."""
    if _stopped_by is not None:
        raise KeyboardInterrupt(_stopped_by)


def _quiet_about_lost_stops(hook):
    """Python's report of an exception a finalizer could not raise, without the one a stop signal
    raised there: that stop is not lost (raise_if_stopped raises it again), and a traceback on
    Ctrl-C would read as a crash."""
    def report(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _stopped_by is not None:
            return
        hook(unraisable)
    return report


def _raise_keyboard_interrupt(signum, frame):
    global _stopped_by
    _stopped_by = f"signal {signum}"
    if _held:
        return   # remembered; raise_if_stopped raises it once the held block is done
    raise KeyboardInterrupt(_stopped_by)
