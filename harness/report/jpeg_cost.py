"""What the JPEG stand-in costs, as its quality ladder measured it: said beside every table that trains on
the JPEG CIFAR-10, so none of their accuracies reads as the original arrays'.

The ladder (benchmarks/jpeg_ladder.py) re-encodes the data at lower qualities and trains airbench94 on
each with the same seeds; its runs are in `ladder.csv` beside its README, and the recompute.py of its
results folder checks each of them against the store. What it measures is the cost of going down from
the data's own quality, paired by seed; what that quality costs against the original arrays it cannot
measure (re-encoding cannot add back what quality 75 dropped), and the sentence says so.
"""

from __future__ import annotations

import csv
from pathlib import Path

from harness.folders import REPO_ROOT, RESULTS_DIR
from harness.report.intervals import median_interval


def ladders(root: Path = RESULTS_DIR) -> list[Path]:
    """The committed ladders' CSVs, in path order."""
    return sorted(root.glob("**/jpeg-ladder/ladder.csv"))


def cost_sentence(root: Path = RESULTS_DIR) -> str:
    """One sentence per ladder: each lower rung against the data's own quality, paired by seed, with
    its 95% interval; "" when no ladder is committed."""
    parts = []
    for path in ladders(root):
        runs = [r for r in csv.DictReader(path.open()) if r["fp32_pair"] == "False"]
        by_quality: dict[int, dict[int, dict]] = {}
        for r in runs:
            by_quality.setdefault(int(r["jpeg_quality"]), {})[int(r["seed"])] = r
        top, *lower = sorted(by_quality, reverse=True)
        steps = []
        for quality in lower:
            seeds = sorted(set(by_quality[top]) & set(by_quality[quality]))
            if len(seeds) < 2:
                continue
            value, lo, hi = median_interval([float(by_quality[top][s]["test_accuracy"])
                                             - float(by_quality[quality][s]["test_accuracy"]) for s in seeds])
            steps.append(f"to quality {quality} ({_image_bytes(by_quality[quality]):.0f} image bytes an image) costs "
                         f"{100 * value:.2f} points [{100 * lo:.2f}, {100 * hi:.2f}]")
        if steps:
            where = path.parent.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else path.parent
            parts.append(f"re-encoding the data's quality {top} ({_image_bytes(by_quality[top]):.0f} image bytes an "
                         f"image) {' and '.join(steps)}, paired by seed over {len(by_quality[top])} seeds of airbench94 "
                         f"(`{where}/`); what quality {top} itself costs against the original arrays is not measured")
    if not parts:
        return ""
    return "what the compression costs, as its quality ladder measured it: " + "; ".join(parts)


def _image_bytes(runs: dict[int, dict]) -> float:
    return float(next(iter(runs.values()))["image_bytes_per_image"])
