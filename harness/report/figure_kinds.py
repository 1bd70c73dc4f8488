"""What moves a figure from run to run: the machine's speed (a timing) or the seed it trained (an
accuracy). The checks judge each kind on its own evidence (rounds, seeds), and a contended cell's
timings are shown but never judged (contention.py)."""

from __future__ import annotations

import pandas as pd


def is_time(metric: str) -> bool:
    """A duration in seconds (train_time_s, time_to_accuracy_s)."""
    return metric.endswith("_s") and "time" in metric


def is_timing(metric: str, table: pd.DataFrame | None = None) -> bool:
    """A figure that moves with the machine's speed from run to run: a time, a speed-up, an
    efficiency, a throughput (and the table's own time metric)."""
    time = table.attrs.get("time") if table is not None else None
    # "_over_": a ratio of two times taken in one process (numpy_over_torch), as noisy as they are
    return metric in ("speedup", "efficiency", "samples_per_s", "mfu", time) or is_time(metric) or "_over_" in metric


def is_accuracy(metric: str) -> bool:
    """A figure that moves with the seed a run trained: an accuracy (a time to accuracy is a time)."""
    return "accuracy" in metric and "to_accuracy" not in metric
