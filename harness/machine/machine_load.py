"""How busy the machine was around a cell, so a time measured while other work took its cores is
flagged rather than trusted.

The load average alone cannot tell our own training threads from someone else's, so the watch also
counts what it can attribute: the CPU seconds the whole machine spent busy (/proc/stat) minus the
CPU seconds this process and its waited-for children spent (os.times; a DDP run's ranks are
children of torchrun, which is our child, so their time is ours too). What is left, over the wall
time, is the number of cores other work kept busy. Linux only; elsewhere nothing is recorded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# Other work holding half a core or more, on average over the cell, makes its times suspect: on the
# 2-core machines this harness is measured on that was enough to slow epochs 2-4x.
CONTENDED_CORES = 0.5
CONTENDED, OTHER_CORES = "contended", "other_busy_cores"   # the metrics a run logs of it


@dataclass(frozen=True)
class _Sample:
    wall: float
    machine_busy_s: float   # every core's busy seconds since boot
    own_cpu_s: float        # this process and its reaped children
    load1: float


def _sample() -> _Sample | None:
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: idle and iowait are not busy
    busy = sum(fields[:3]) + sum(fields[5:8])
    own = os.times()
    return _Sample(time.monotonic(), busy / os.sysconf("SC_CLK_TCK"),
                   own.user + own.system + own.children_user + own.children_system, os.getloadavg()[0])


class LoadWatch:
    """Made just before a cell starts; `finish()` after it returns the metrics that say how busy the
    machine was: the 1-minute load average before and after, the cores other work kept busy on
    average, and `contended` (1 when that was CONTENDED_CORES or more)."""

    def __init__(self) -> None:
        self._start = _sample()

    def finish(self) -> dict[str, float]:
        end = _sample()
        if self._start is None or end is None or end.wall <= self._start.wall:
            return {}
        wall = end.wall - self._start.wall
        others = (end.machine_busy_s - self._start.machine_busy_s) - (end.own_cpu_s - self._start.own_cpu_s)
        other_cores = max(0.0, others / wall)
        return {"load_avg_before": self._start.load1, "load_avg_after": end.load1,
                OTHER_CORES: other_cores, CONTENDED: float(other_cores >= CONTENDED_CORES)}
