"""Which process wrote a record, and whether it still lives: how a dead worker's runs, claims and
trials are told apart from a live one's. A pid alone is not enough (pids are recycled), so a
process is named by host, pid and start time."""

from __future__ import annotations

import functools
import socket
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    pid: int
    started: float  # psutil create_time, seconds since the epoch


@functools.cache
def this_process() -> ProcessIdentity:
    me = psutil.Process()
    return ProcessIdentity(socket.gethostname(), me.pid, me.create_time())


def process_alive(pid: int | str | None, started: float | str | None) -> bool:
    """Whether the process `pid` of this host that started at `started` still runs."""
    if pid is None or not str(pid).isdigit():
        return False
    try:
        proc = psutil.Process(int(pid))
        # A recycled pid belongs to a process that started later than the one that logged.
        return started in (None, "", "None") or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False
