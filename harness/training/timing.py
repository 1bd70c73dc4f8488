"""Clocks that mean what they say: the device is synchronized before every reading, so queued
GPU work is inside the interval it belongs to, and repeats are summarised by median and spread."""

from __future__ import annotations

import resource
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch


def synchronize(*devices: torch.device | str) -> None:
    """Wait until every given device has finished its queued work (a CPU has no queue)."""
    for device in dict.fromkeys(torch.device(d) for d in devices):  # each device once, in order
        if device.type == "cuda":
            torch.cuda.synchronize(device)


class Interval:
    seconds: float = float("nan")


@contextmanager
def timed(*devices: torch.device | str):
    """`with timed(dev) as t: ...` then `t.seconds`; every device given is synchronized on entry
    and exit, so work queued on any of them (the last update on a second GPU) is inside the clock."""
    interval = Interval()
    synchronize(*devices)
    start = time.perf_counter()
    try:
        yield interval
    finally:
        synchronize(*devices)
        interval.seconds = time.perf_counter() - start


def spread(values: list[float]) -> dict[str, float]:
    """Median, interquartile range, min and max of repeated measurements."""
    if not values:
        return {}
    ordered = sorted(values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median": statistics.median(ordered), "iqr": q3 - q1, "min": ordered[0], "max": ordered[-1]}


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM). False if unsupported."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident memory of this process since the last reset (whole life where reset is unsupported)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
