"""The JPEG ladder's fit: test accuracy against bytes per image, and what it says about raw pixels.

The model is linear in log bytes, accuracy = a + b ln(bytes per image), fitted by least squares to
every run (each seed a point). Its prediction at raw pixels (3,072 bytes: 32 x 32 x 3 bytes, no
compression) comes with a 95% bootstrap interval: the runs are resampled with replacement within
each rung (every rung keeps its number of seeds, so the fit always spans the same qualities), the
line refitted, the prediction read off, 2,000 times. That interval holds the seed noise only; the
model's form is an assumption, and raw pixels lie beyond the ladder's largest rung, so the
prediction is an extrapolation and the summary says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RAW_BYTES = 32 * 32 * 3       # a CIFAR-10 image as raw pixels
DRAWS = 2000
PUBLISHED = 0.9401            # airbench94's published accuracy on the original arrays (n = 1,000)


@dataclass(frozen=True)
class Fit:
    intercept: float
    slope: float                          # accuracy per unit of ln(bytes per image)
    at_raw: float                         # the line at RAW_BYTES
    interval: tuple[float, float]         # 95% bootstrap interval of at_raw
    points: int
    largest_bytes: float                  # the ladder's largest rung: beyond it the line is extrapolated

    @property
    def extrapolated(self) -> bool:
        return RAW_BYTES > self.largest_bytes


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.log(x), y, 1)
    return float(intercept), float(slope)


def fit(bytes_per_image: list[float], accuracy: list[float], seed: int = 0) -> Fit:
    """The line through (ln bytes, accuracy) of every run, and its bootstrap at raw pixels; needs
    at least two rungs (distinct bytes per image)."""
    x, y = np.asarray(bytes_per_image, float), np.asarray(accuracy, float)
    rungs = [np.flatnonzero(x == b) for b in np.unique(x)]
    if len(rungs) < 2:
        raise ValueError("a fit of accuracy against bytes per image needs runs on at least two rungs")
    intercept, slope = _line(x, y)
    rng = np.random.default_rng(seed)
    predictions = []
    for _ in range(DRAWS):
        drawn = np.concatenate([rng.choice(rung, len(rung)) for rung in rungs])
        a, b = _line(x[drawn], y[drawn])
        predictions.append(a + b * math.log(RAW_BYTES))
    low, high = np.percentile(predictions, [2.5, 97.5])
    return Fit(intercept, slope, intercept + slope * math.log(RAW_BYTES), (float(low), float(high)), len(x),
               float(x.max()))


def summary(found: Fit, rows: list[dict], source_quality: int | None, scale: str) -> str:
    """The ladder's Markdown summary: the rungs, the fit, its prediction for raw pixels (marked an
    extrapolation when it is one), the gap to the published 94.01%, and the fp32 pair."""
    lines = [f"# airbench94 on a JPEG quality ladder (scale {scale})", "",
             "Each rung is the training and test images re-encoded at one JPEG quality (the top rung is the data "
             "as it is" + (f", whose quantisation tables are those of quality {source_quality}" if source_quality
                           else "") + "); airbench94 as published trains on each with several seeds.", "",
             "| jpeg quality | bytes per image | runs | median accuracy (TTA) | min | max |", "|---|---|---|---|---|---|"]
    ladder = [r for r in rows if not r["fp32_pair"]]
    for quality in sorted({r["jpeg_quality"] for r in ladder}, reverse=True):
        acc = sorted(r["test_accuracy"] for r in ladder if r["jpeg_quality"] == quality)
        size = next(r["bytes_per_image"] for r in ladder if r["jpeg_quality"] == quality)
        lines.append(f"| {quality} | {size:.0f} | {len(acc)} | {100 * float(np.median(acc)):.2f}% | "
                     f"{100 * acc[0]:.2f}% | {100 * acc[-1]:.2f}% |")
    low, high = found.interval
    kind = ("an **extrapolation**: raw pixels (3,072 bytes) lie beyond the largest rung "
            f"({found.largest_bytes:.0f} bytes), so the line is assumed to hold where nothing was measured"
            if found.extrapolated else "inside the measured range")
    lines += ["", f"Fit (least squares over {found.points} runs): accuracy = {found.intercept:.4f} "
              f"{'+' if found.slope >= 0 else '-'} {abs(found.slope):.4f} ln(bytes per image), "
              f"{100 * found.slope * math.log(2):+.2f} points per doubling of the bytes.", "",
              f"Predicted for raw pixels ({RAW_BYTES:,} bytes an image): **{100 * found.at_raw:.2f}%**, 95% bootstrap "
              f"interval {100 * low:.2f}-{100 * high:.2f}% (runs resampled within each rung, {DRAWS:,} draws). This is "
              f"{kind}. The interval holds the seed noise only, not the doubt about the line's form."
              + (" A prediction above 100% says the line cannot hold that far: no accuracy figure follows from it."
                 if high > 1 else ""), "",
              f"Against the paper's {100 * PUBLISHED:.2f}% on the original arrays: the fit "
              + ("accounts for the gap within its interval." if low <= PUBLISHED <= high else
                 f"leaves {100 * (PUBLISHED - found.at_raw):+.2f} points unexplained by the JPEG compression "
                 "(its interval excludes 94.01%).")]
    lines += _fp32_pair(rows)
    return "\n".join(lines) + "\n"


def _fp32_pair(rows: list[dict]) -> list[str]:
    pair = [r for r in rows if r["fp32_pair"]]
    if not pair:
        return []
    fp32 = pair[0]
    twin = [r for r in rows if not r["fp32_pair"] and r["jpeg_quality"] == fp32["jpeg_quality"]
            and r["seed"] == fp32["seed"]]
    if not twin:
        return ["", f"fp32 (autocast off) on the top rung, seed {fp32['seed']}: {100 * fp32['test_accuracy']:.2f}% "
                "(its bf16 twin has not run)."]
    bf16 = twin[0]
    return ["", f"Precision, one pair on the top rung (seed {fp32['seed']}): bf16 autocast "
            f"{100 * bf16['test_accuracy']:.2f}%, true fp32 {100 * fp32['test_accuracy']:.2f}% "
            f"({100 * (fp32['test_accuracy'] - bf16['test_accuracy']):+.2f} points; one seed, so a difference "
            "inside the seeds' spread above is no evidence either way)."]
