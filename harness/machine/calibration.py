"""How fast this machine is today: a short fixed calibration each sweep invocation runs before its
cells and again as each later round starts, logged as the metric `speed_index` on every cell (and as the tag `harness.speed_index` on the
parent run, where a metric would crowd the chart view of the cells).

The fingerprint (harness/machine/fingerprint.py) says which machine; this says how fast it runs now. The
same fingerprint has been seen to move by a factor of two from one day to the next (a shared host,
another tenant, a thermal limit), so a cell measured on a slower or faster day is not comparable
with today's cells. The sweep names reused cells whose index is more than DRIFT_TOLERANCE away
from today's (`--remeasure-drifted` measures them again) and the report says so when a table's
ratios mix them.

The work: a 256x256 fp32 matmul chain and one forward+backward step of a 3x3 convolution on a
32x16x32x32 batch (a few milliseconds), timed call by call for about a second after a few untimed
calls; the index is the reciprocal of the median call, in units of "calibrations per second"
(higher is faster). `HARNESS_CALIBRATION_S` sets the budget (the tests shorten it).

Five timed calls (about 20 ms) were too few. `make bench-calibration`, 10 fresh processes on an idle
2-core guest (2026-12-03): five calls, CV 22.8% (135-242); the 1 s budget, CV 13.1% (176-245).
The host itself runs at two speeds there (seven processes near 185, three near 237), so even the
longer calibration puts half of those same-machine pairs more than DRIFT_TOLERANCE apart: read a
"drifted" note against this machine's bench-calibration figures.
"""

from __future__ import annotations

import os
import statistics
import time

SPEED_INDEX = "speed_index"
# Two indices further apart than this are different speeds: 10%, the upper end of the run-to-run
# spread of one cell on an idle 2-core machine (issue figures: 6-14% between identical cells);
# `make bench-noise` measures this machine's own.
DRIFT_TOLERANCE = 0.10
ROUNDS = 5          # timed calls at least, whatever the budget
WARMUP_CALLS = 3    # untimed: allocation, kernel selection, the thread pool waking
BUDGET_S = 1.0


def budget_s() -> float:
    return float(os.environ.get("HARNESS_CALIBRATION_S", BUDGET_S))


def measure(rounds: int = ROUNDS, seconds: float | None = None) -> float:
    """The speed index of this process's CPU now (its torch thread count): at least `rounds` timed
    calls, and more until `seconds` (default: budget_s()) have passed."""
    import torch

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=generator)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1)
    batch = torch.randn(32, 16, 32, 32, generator=generator)

    def work() -> None:
        x = a
        for _ in range(8):
            x = torch.tanh(x @ a)
        conv.zero_grad(set_to_none=True)
        conv(batch).square().mean().backward()

    for _ in range(WARMUP_CALLS):
        work()
    budget = budget_s() if seconds is None else seconds
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < rounds or time.perf_counter() - began < budget:
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return 1.0 / statistics.median(times)


def drift(then: float | None, now: float | None) -> float | None:
    """How far apart two indices are, as a fraction of the smaller (None when either is unknown)."""
    if not then or not now:
        return None
    return max(then, now) / min(then, now) - 1


def drifted(then: float | None, now: float | None) -> bool:
    found = drift(then, now)
    return found is not None and found > DRIFT_TOLERANCE
