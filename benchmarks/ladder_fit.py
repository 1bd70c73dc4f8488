"""The JPEG ladder's fit: test accuracy against image bytes, and what it says about raw pixels.

The x axis is a rung's image bytes: the mean size of its files' compressed image data, headers left
out (benchmarks/jpeg_ladder.py). The model is linear in their log, accuracy = a + b ln(image bytes),
fitted by least squares to every run (each seed a point). Its prediction at raw pixels (3,072
bytes: 32 x 32 x 3 bytes, no compression) comes with a 95% bootstrap interval: the runs are resampled
with replacement within each rung (every rung keeps its number of seeds, so the fit always spans the
same qualities), the line refitted, the prediction read off, 2,000 times. That interval holds the
seed noise only; the model's form is an assumption, and raw pixels lie beyond the ladder's largest
rung, so the prediction is an extrapolation and the summary says so. What needs no model comes
first: each lower rung against the top one, paired by seed, as the report forms an accuracy's
interval (harness/report/intervals.py). Two rungs only fix the line; from three on, each rung
between two others tests its form: paired by seed, how far the rung sits from the chord joining its
neighbours (above it, the gains flatten as the bytes grow and the line overstates raw pixels).
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
    """The ladder's Markdown summary: the rungs, each lower rung against the top one paired by seed,
    the fit and its prediction for raw pixels (marked an extrapolation when it is one), the gap to the
    published 94.01%, and the fp32 pair where there is one."""
    lines = [f"# airbench94 on a JPEG quality ladder (scale {scale})", "",
             "Each rung is the training and test images re-encoded at one JPEG quality (the top rung is the data "
             "as it is" + (f", whose quantisation tables are those of quality {source_quality}" if source_quality
                           else "") + "); airbench94 as published trains on each with several seeds. A rung's "
             "image bytes are its files' compressed image data alone: the headers (quantisation and Huffman "
             "tables) are the same size at every quality and say nothing about the image.", "",
             "| jpeg quality | image bytes per image | file bytes per image | runs | median accuracy (TTA) | min | max |",
             "|---|---|---|---|---|---|---|"]
    ladder = [r for r in rows if not r["fp32_pair"]]
    qualities = sorted({r["jpeg_quality"] for r in ladder}, reverse=True)
    for quality in qualities:
        acc = sorted(r["test_accuracy"] for r in ladder if r["jpeg_quality"] == quality)
        first = next(r for r in ladder if r["jpeg_quality"] == quality)
        lines.append(f"| {quality} | {first['image_bytes_per_image']:.0f} | {first['bytes_per_image']:.0f} | "
                     f"{len(acc)} | {100 * float(np.median(acc)):.2f}% | {100 * acc[0]:.2f}% | {100 * acc[-1]:.2f}% |")
    reused = sorted({r["experiment"] for r in ladder if r.get("experiment") and r["jpeg_quality"] == qualities[0]})
    if reused and reused != ["airbench-jpeg-ladder"]:
        lines += ["", f"The top rung's runs are the `{reused[0]}` sweep's own cells at this scale (the same recipe "
                  "and seeds; its checks during training only read the model), read from the store, not trained again."]
    lines += [""] + [_paired(ladder, qualities[0], q) for q in qualities[1:]]
    low, high = found.interval
    kind = ("an **extrapolation**: raw pixels (3,072 bytes) lie beyond the largest rung "
            f"({found.largest_bytes:.0f} image bytes), so the line is assumed to hold where nothing was measured"
            if found.extrapolated else "inside the measured range")
    form = (" With two rungs the line only joins their points: nothing tests its form." if len(qualities) == 2 else "")
    bends = _bends(ladder)
    lines += ["", f"Fit (least squares over {found.points} runs): accuracy = {found.intercept:.4f} "
              f"{'+' if found.slope >= 0 else '-'} {abs(found.slope):.4f} ln(image bytes per image), "
              f"{100 * found.slope * math.log(2):+.2f} points per doubling of the bytes.{form}"]
    if bends:
        lines += ["", "The line's form, tested by each rung between two others (paired by seed: the rung's accuracy "
                  "minus the chord joining its neighbours in ln image bytes, where a straight line puts it):"]
        lines += [_bend_line(b) for b in bends]
    lines += ["",
              f"Predicted for raw pixels ({RAW_BYTES:,} bytes an image): **{100 * found.at_raw:.2f}%**, 95% bootstrap "
              f"interval {100 * low:.2f}-{100 * high:.2f}% (runs resampled within each rung, {DRAWS:,} draws). This is "
              f"{kind}. The interval holds the seed noise only, not the doubt about the line's form."
              + (" A prediction above 100% says the line cannot hold that far: no accuracy figure follows from it."
                 if high > 1 else ""), "",
              f"Against the paper's {100 * PUBLISHED:.2f}% on the original arrays: " + _against_published(found)]
    if any(r["fp32_pair"] for r in rows):
        lines += _fp32_pair(rows)
    elif {r.get("dtype") for r in ladder} == {"fp32"}:
        lines += ["", "No precision pair: the runs train in fp32 already."]
    return "\n".join(lines) + "\n"


def _against_published(found: Fit) -> str:
    low, high = found.interval
    if high > 1:
        return "no comparison follows from a line that cannot hold at raw pixels."
    if low <= PUBLISHED <= high:
        return "the fit accounts for the gap within its interval."
    if found.at_raw < PUBLISHED:
        return (f"the fit leaves {100 * (PUBLISHED - found.at_raw):.2f} points unexplained by the JPEG compression "
                "(its interval excludes 94.01%).")
    return (f"the fit predicts {100 * (found.at_raw - PUBLISHED):.2f} points more than the paper reached (its interval "
            "excludes 94.01%): the line overstates what raw pixels give, or the recipe does better on them here.")


@dataclass(frozen=True)
class Bend:
    """How far one rung sits from the chord joining the rungs on either side of it, paired by seed."""
    quality: int
    below: int                            # the neighbouring rung with fewer bytes
    above: int                            # and the one with more
    differences: list[float]              # one per seed that ran on all three
    median: float
    low: float
    high: float


def bend(ladder: list[dict], below: int, quality: int, above: int) -> Bend:
    """Rung `quality` against the chord from rung `below` to rung `above` in ln image bytes, over the
    seeds all three ran: a straight line in ln bytes puts every rung on it."""
    from harness.report.intervals import median_interval

    def rung(q):
        size = next(r["image_bytes_per_image"] for r in ladder if r["jpeg_quality"] == q)
        return math.log(size), _by_seed(ladder, q)

    (x_lo, lo), (x, mid), (x_hi, hi) = rung(below), rung(quality), rung(above)
    weight = (x - x_lo) / (x_hi - x_lo)
    seeds = sorted(set(lo) & set(mid) & set(hi))
    differences = [mid[s] - (lo[s] + weight * (hi[s] - lo[s])) for s in seeds]
    value, low, high = median_interval(differences)
    return Bend(quality, below, above, differences, value, low, high)


def _bends(ladder: list[dict]) -> list[Bend]:
    by_bytes = sorted({(r["image_bytes_per_image"], r["jpeg_quality"]) for r in ladder})
    return [bend(ladder, by_bytes[i - 1][1], by_bytes[i][1], by_bytes[i + 1][1]) for i in range(1, len(by_bytes) - 1)]


def _bend_line(found: Bend) -> str:
    head = f"- Quality {found.quality} against the chord from {found.below} to {found.above}"
    if not found.differences:
        return head + ": no seed ran on all three."
    each = ", ".join(f"{100 * d:+.2f}" for d in found.differences)
    head += f" (n = {len(found.differences)}: {each} points): median **{100 * found.median:+.2f} points**"
    if len(found.differences) < 2:
        return head + " (one seed: no interval, no verdict on the form)."
    head += f" [{100 * found.low:+.2f}, {100 * found.high:+.2f}] (95% interval)"
    if found.low > 0:
        return (head + ": above the chord. The gains flatten as the bytes grow, so a straight line in ln bytes "
                "overstates what more bytes give, and most of all at raw pixels.")
    if found.high < 0:
        return (head + ": below the chord. The gains steepen as the bytes grow, so a straight line in ln bytes "
                "understates what more bytes give.")
    return (head + ": on the chord within its interval. Over these rungs the straight line is not contradicted; "
            "a bend smaller than the interval would go unseen, and nothing here tests it beyond the largest rung.")


def _by_seed(ladder: list[dict], quality: int) -> dict[int, float]:
    """A rung's accuracies by seed: what pairs two rungs (each seed fixes the initialisation and batches)."""
    return {r["seed"]: r["test_accuracy"] for r in ladder if r["jpeg_quality"] == quality}


def _paired(ladder: list[dict], top: int, quality: int) -> str:
    """Quality `quality` against the top rung over the seeds both ran: the median difference with its
    95% interval (no interval from one seed)."""
    from harness.report.intervals import median_interval

    upper, lower = _by_seed(ladder, top), _by_seed(ladder, quality)
    seeds = sorted(set(upper) & set(lower))
    if not seeds:
        return f"- Quality {quality} against {top}: no seed ran on both."
    differences = [lower[s] - upper[s] for s in seeds]
    value, lo, hi = median_interval(differences)
    each = ", ".join(f"{100 * d:+.2f}" for d in differences)
    interval = f" [{100 * lo:+.2f}, {100 * hi:+.2f}] (95% interval)" if len(seeds) > 1 else " (one seed: no interval)"
    return (f"- Quality {quality} against {top}, paired by seed (n = {len(seeds)}: {each} points): median "
            f"**{100 * value:+.2f} points**{interval}.")


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
