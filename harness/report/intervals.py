"""Figures over repeats: medians, their spread, the ratio of two medians with a 95% interval, and a
median over seeds (an accuracy) with its interval.

A speed-up is the baseline's median time over the row's median time. Its interval comes from a
bootstrap over the rounds (harness/specs/sweep_spec.py runs a grid in rounds, A B C, A B C): resampling
whole rounds, the same ones for both rows, keeps what drifted between rounds (the machine) out of
the ratio. Rows whose rounds do not line up are resampled each on its own.

Why not the percentile interval: at 3 repeats a percentile bootstrap covers far less than 95%
(simulated A/A pairs with 3% noise: 26% of them came out "faster" at n = 3). The interval here is
the bootstrap's standard error of the log ratio times Student's t for n - 1 degrees of freedom
(Efron & Tibshirani, An Introduction to the Bootstrap, ch. 12-13: the bootstrap-SE interval, t for
small n): in the same simulation 3% (n = 3) and 2% (n = 5) came out "faster". The random stream is
seeded, so a report of the same cells prints the same interval every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20   # fixed: the same cells give the same interval in every report


@dataclass(frozen=True)
class Ratio:
    value: float
    lo: float
    hi: float
    n: int          # rounds paired (or the smaller row's repeats when unpaired)
    paired: bool

    @property
    def decided(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))


@dataclass(eq=False)
class Rounds:
    """What a table keeps of its cells for the checks' intervals (in `table.attrs["rounds"]`; compared
    by identity, so pandas can carry it through a concat): each cell's values with its grid point and
    repeat, and each metric's column recomputed on resampled rounds, shape (resamples, rows)."""
    cells: pd.DataFrame
    replicates: dict


def median(values) -> float:
    values = [v for v in values if v is not None and not pd.isna(v)]
    return float(np.median(values)) if values else float("nan")


def iqr(values) -> float:
    """The interquartile range; NaN for fewer than two values (one run has no spread to show)."""
    values = [v for v in values if v is not None and not pd.isna(v)]
    if len(values) < 2:
        return float("nan")
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


def _t(n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))


def ratio_of_medians(numerator: dict[int, float], denominator: dict[int, float]) -> Ratio:
    """median(numerator) / median(denominator) with its interval. Each side maps a round (the
    cells' `repeat`) to its value. Where the sides share two rounds or more, the ratio is formed over
    those rounds alone, resampled together: a round one side lacks (`--until-decided` adds rounds to
    some grid points only, perhaps hours later on a machine at another speed) has no partner that
    saw the same machine, and counted on one side it would move the ratio by the drift."""
    num = {k: v for k, v in numerator.items() if v is not None and not pd.isna(v)}
    den = {k: v for k, v in denominator.items() if v is not None and not pd.isna(v) and v != 0}
    if not num or not den:
        return Ratio(float("nan"), float("nan"), float("nan"), 0, False)
    shared = sorted(set(num) & set(den))
    paired = len(shared) >= 2
    if paired:
        num, den = {k: num[k] for k in shared}, {k: den[k] for k in shared}
    value = median(num.values()) / median(den.values())
    n = len(shared) if paired else min(len(num), len(den))
    if n < 2 or value <= 0:
        return Ratio(value, float("nan"), float("nan"), n, paired)
    rng = np.random.default_rng(SEED)
    if paired:
        a = np.array([num[k] for k in shared])
        b = np.array([den[k] for k in shared])
        pick = rng.integers(0, n, (RESAMPLES, n))
        draws = np.median(a[pick], axis=1) / np.median(b[pick], axis=1)
    else:
        a, b = np.array(list(num.values())), np.array(list(den.values()))
        draws = (np.median(a[rng.integers(0, len(a), (RESAMPLES, len(a)))], axis=1)
                 / np.median(b[rng.integers(0, len(b), (RESAMPLES, len(b)))], axis=1))
    spread = float(np.std(np.log(draws), ddof=1)) * _t(n)
    return Ratio(value, value * math.exp(-spread), value * math.exp(spread), n, paired)


def median_interval(values) -> tuple[float, float, float]:
    """The median of a row's values over seeds with its 95% interval: the bootstrap's standard
    error of the median times Student's t for n - 1 degrees of freedom, as for a ratio (on the
    figure's own scale: an accuracy is a fraction, not a ratio). No interval below two values."""
    found = np.array([v for v in values if v is not None and not pd.isna(v)], dtype=float)
    if len(found) == 0:
        return float("nan"), float("nan"), float("nan")
    value = float(np.median(found))
    if len(found) < 2:
        return value, float("nan"), float("nan")
    rng = np.random.default_rng(SEED)
    draws = np.median(found[rng.integers(0, len(found), (RESAMPLES, len(found)))], axis=1)
    spread = float(np.std(draws, ddof=1)) * _t(len(found))
    return value, value - spread, value + spread


def format_ratio(value: float, lo: float = float("nan"), hi: float = float("nan"), suffix: str = "x",
                 digits: int = 2) -> str:
    """`1.83x [1.76, 1.90]`; the value alone when there is no interval (one repeat), "—" for none.
    The one format every table of ratios uses (this module's tables and REPRODUCTION.md)."""
    if value is None or pd.isna(value):
        return "—"
    text = f"{value:.{digits}f}{suffix}"
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return text
    return f"{text} [{lo:.{digits}f}, {hi:.{digits}f}]"


def format_percent(value: float, lo: float = float("nan"), hi: float = float("nan")) -> str:
    """An efficiency as `91% [85, 97]`."""
    if value is None or pd.isna(value):
        return "—"
    text = f"{100 * value:.0f}%"
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return text
    return f"{text} [{100 * lo:.0f}, {100 * hi:.0f}]"


def bounds(column: str) -> tuple[str, str]:
    """The names of a column's interval bounds in a table frame and its CSV."""
    return f"{column}_lo", f"{column}_hi"
