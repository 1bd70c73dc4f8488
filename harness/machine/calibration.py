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
The host itself runs at two speeds there (seven processes near 185, three near 237), so a tolerance
below that spread would call the same machine two machines: DRIFT_TOLERANCE is derived from that CV.

A calibration is itself a timing: taken while other work held the cores it measures the contention,
not the machine (a sweep calibrated under load once read less than half the speed of the same
machine idle a quarter of an hour later). So the load
around it is recorded (the load probe, harness/machine/machine_load.py) and an index taken under load
is never compared with another: it is neither called drifted nor makes others drifted.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

from harness.machine.machine_load import CONTENDED_CORES, LoadWatch

SPEED_INDEX = "speed_index"
# The cores other work kept busy while the calibration ran (the metric on every cell, a tag on the
# parent run beside the index): CONTENDED_CORES or more and the index is not compared.
SPEED_LOAD = "speed_index_other_cores"
# In words, for the notes that name the index (a reader meets "speed_index" there first).
SPEED_INDEX_WORDS = ("speed_index, how fast the machine ran a fixed ~1 s matmul-and-convolution calibration "
                     "(calls per second; higher is faster)")
# The index's own run-to-run spread on an idle machine: `make bench-calibration`, 10 fresh processes
# on the idle 2-core guest of 2026-12-03, 1 s budget (docs/MEASUREMENT.md).
CALIBRATION_CV = 0.131
# Two indices further apart than this are different speeds: what 95% of pairs of idle calibrations of
# one machine stay within, given that CV. Each index's log has a spread of about the CV, so the log of
# a pair's ratio has sqrt(2) times it, and 1.96 of those bound 95% of pairs: exp(1.96 * sqrt(2) * CV)
# - 1 = 44% (the 10 processes above spread 176-245, 39% apart).
DRIFT_TOLERANCE = math.expm1(1.96 * math.sqrt(2) * CALIBRATION_CV)
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


@dataclass(frozen=True)
class Calibration:
    """An index with the load around it: `other_cores` is None where that is not known (not Linux,
    or a cell logged before the load was recorded), and such an index is compared as before."""
    index: float
    other_cores: float | None = None

    @property
    def under_load(self) -> bool:
        return self.other_cores is not None and self.other_cores >= CONTENDED_CORES

    def metrics(self) -> dict[str, float]:
        return {SPEED_INDEX: self.index} | ({} if self.other_cores is None else {SPEED_LOAD: self.other_cores})

    def text(self) -> str:
        """The index as the sweep prints it, saying when it was taken under load."""
        if not self.under_load:
            return f"speed_index {self.index:.3g}"
        return (f"speed_index {self.index:.3g}, taken while other work held {self.other_cores:.1f} cores: "
                "it measures that contention, not the machine, and is compared with no other")


def of(metrics: dict[str, float]) -> Calibration | None:
    """The calibration a cell (or a parent run's tags, as numbers) carries, or None."""
    index = metrics.get(SPEED_INDEX)
    if not index:
        return None
    load = metrics.get(SPEED_LOAD)
    return Calibration(float(index), None if load is None else float(load))


def calibrate() -> Calibration:
    """measure() with the load probe around it."""
    watch = LoadWatch()
    index = measure()
    return Calibration(index, watch.finish().get("other_busy_cores"))


def differ(then: Calibration | None, now: Calibration | None) -> bool:
    """Whether two calibrations say the machine ran at different speeds: both known, neither taken
    under load, and further apart than DRIFT_TOLERANCE."""
    if then is None or now is None or then.under_load or now.under_load:
        return False
    return drifted(then.index, now.index)


def drift(then: float | None, now: float | None) -> float | None:
    """How far apart two indices are, as a fraction of the smaller (None when either is unknown)."""
    if not then or not now:
        return None
    return max(then, now) / min(then, now) - 1


def drifted(then: float | None, now: float | None) -> bool:
    found = drift(then, now)
    return found is not None and found > DRIFT_TOLERANCE
