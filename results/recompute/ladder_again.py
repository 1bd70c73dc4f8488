"""A JPEG quality ladder beside a folder's tables (benchmarks/jpeg_ladder.py): each run checked
against the store, its README's paired differences, the bend of each middle rung and the fitted
line recomputed."""
from __future__ import annotations

import csv
import math
import pathlib
import statistics

from read_store import Store, same


def check_ladder(folder: pathlib.Path, store: Store) -> int:
    """A JPEG quality ladder beside the tables: each run against the store, and its README's paired
    differences, the bend of each middle rung and the fitted line recomputed."""
    ladder = folder / "jpeg-ladder"
    if not (ladder / "ladder.csv").exists():
        return 0
    checked = 0
    runs = list(csv.DictReader(open(ladder / "ladder.csv")))
    readme = (ladder / "README.md").read_text()
    db = store.db
    print(f"== jpeg-ladder ({len(runs)} runs)")
    for run in runs:
        metrics = dict(db.execute("select key, value from latest_metrics where run_uuid=?", (run["mlflow_run_id"],)))
        params = dict(db.execute("select key, value from params where run_uuid=?", (run["mlflow_run_id"],)))
        sweep = db.execute("select value from tags where run_uuid=? and key='harness.sweep'", (run["mlflow_run_id"],)).fetchone()
        assert sweep[0] == run["experiment"], run
        assert int(params["seed"]) == int(run["seed"]) and params["dtype"] == run["dtype"], run
        for name in ("test_accuracy", "test_accuracy_no_tta", "train_time_s"):
            assert same(metrics[name], run[name]), (run, name)
            checked += 1
    ladder_runs = [r for r in runs if r["fp32_pair"] == "False"]
    qualities = sorted({int(r["jpeg_quality"]) for r in ladder_runs}, reverse=True)
    by_seed = {q: {int(r["seed"]): float(r["test_accuracy"]) for r in ladder_runs if int(r["jpeg_quality"]) == q}
               for q in qualities}
    for q in qualities[1:]:
        shared = sorted(set(by_seed[q]) & set(by_seed[qualities[0]]))
        median = statistics.median(by_seed[q][s] - by_seed[qualities[0]][s] for s in shared)
        assert f"**{100 * median:+.2f} points**" in readme, (q, median)
        print(f"q{q} against q{qualities[0]}, paired by seed: median {100 * median:+.2f} points over {len(shared)} seeds")
        checked += 1
    by_bytes = sorted({(float(r["image_bytes_per_image"]), int(r["jpeg_quality"])) for r in ladder_runs})
    for (b_lo, q_lo), (b, q), (b_hi, q_hi) in zip(by_bytes, by_bytes[1:], by_bytes[2:]):
        w = (math.log(b) - math.log(b_lo)) / (math.log(b_hi) - math.log(b_lo))
        shared = sorted(set(by_seed[q_lo]) & set(by_seed[q]) & set(by_seed[q_hi]))
        median = statistics.median(by_seed[q][s] - (by_seed[q_lo][s] + w * (by_seed[q_hi][s] - by_seed[q_lo][s]))
                                   for s in shared)
        line = next(l for l in readme.splitlines() if l.startswith(f"- Quality {q} against the chord from {q_lo} to {q_hi}"))
        assert f"median **{100 * median:+.2f} points**" in line, (q, median, line)
        checked += 1
    x = [math.log(float(r["image_bytes_per_image"])) for r in ladder_runs]
    y = [float(r["test_accuracy"]) for r in ladder_runs]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    intercept = my - slope * mx
    assert f"accuracy = {intercept:.4f} {'+' if slope >= 0 else '-'} {abs(slope):.4f} ln(" in readme, (intercept, slope)
    at_raw = intercept + slope * math.log(32 * 32 * 3)
    assert f"**{100 * at_raw:.2f}%**" in readme, at_raw
    print(f"fit: accuracy = {intercept:.4f} + {slope:.4f} ln(image bytes); at raw pixels {100 * at_raw:.2f}%")
    return checked + 3
