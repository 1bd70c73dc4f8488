"""Recompute this folder's tables from store/ without the harness: for each sweep, the cells of its
newest measurement procedure, grouped by the table's row settings; each row's median time over its
rounds, its median test accuracy over its seeds, and its speed-up over the baseline row, a ratio of
medians over the rounds both rows ran (each round trains one seed for every row, so it pairs them).
Every figure is checked against the CSV the report wrote beside it. A JPEG quality ladder
(jpeg-ladder/, benchmarks/jpeg_ladder.py) is checked run by run against the store, and its README's
paired differences, the bend of each middle rung and the fitted line recomputed. The same script serves every
results folder that holds some of these tables (each on a host of its own): it reads the folder it is in.
Run it from anywhere: python3 results/cpu-2core/data-parallel/recompute.py
"""
import csv
import math
import os
import pathlib
import sqlite3
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
# sweep: (the settings that make a row, the time the speed-up is taken from, the baseline's settings)
TABLES = {
    "dp-scratch": (("world_size", "dp_impl"), "train_time_s", {"world_size": "1"}),
    "resnet": (("world_size",), "epoch_time_mean_s", {"world_size": "1"}),
    "resnet-batch": (("batch_size",), "epoch_time_mean_s", None),
    "resnet-lr": (("lr",), "epoch_time_mean_s", None),
    "resnet-epochs": (("epochs",), "epoch_time_mean_s", None),
    "airbench": (("airbench_rung", "execution"), "train_time_s", None),
}
# accuracies a table shows beside test_accuracy (airbench's without test-time augmentation)
MORE_ACCURACIES = ("test_accuracy_no_tta",)
db = sqlite3.connect(pathlib.Path(HERE, "store", "mlflow.db").as_uri() + "?mode=ro", uri=True)


def tag(run, key):
    row = db.execute("select value from tags where run_uuid=? and key=?", (run, key)).fetchone()
    return None if row is None else row[0]


def cells(sweep):
    """The finished cells of the sweep's newest procedure: {run: (params, metrics)}."""
    runs = [r for (r,) in db.execute("select run_uuid from tags where key='harness.sweep' and value=?", (sweep,))
            if tag(r, "harness.outcome") == "ok" and tag(r, "harness.cell_id")]
    newest = max(int(tag(r, "harness.procedure") or 0) for r in runs)
    found = {}
    for r in runs:
        if int(tag(r, "harness.procedure") or 0) == newest:
            params = dict(db.execute("select key, value from params where run_uuid=?", (r,)))
            metrics = dict(db.execute("select key, value from latest_metrics where run_uuid=?", (r,)))
            found[r] = (params, metrics)
    return found


def same(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def setting(text):
    """A row setting as the store's params and the CSV both write it: 2, 2.0 and "2" are one value."""
    try:
        return float(text)
    except ValueError:
        return text


checked = 0
for sweep, (keys, time_key, baseline) in TABLES.items():
    try:
        rows = list(csv.DictReader(open(f"{HERE}/{sweep}.csv")))
    except FileNotFoundError:
        print(f"{sweep}: not measured in this folder")
        continue
    by_row = {}
    for params, metrics in cells(sweep).values():
        by_row.setdefault(tuple(setting(params[k]) for k in keys), {})[int(params["repeat"])] = (params, metrics)
    print(f"== {sweep} ({len(by_row)} rows)")
    for row in rows:
        key = tuple(setting(row[k]) for k in keys)
        if not row[time_key]:   # a published row this scale does not run (resnet-epochs' 30 epochs)
            assert key not in by_row, (sweep, row)
            print(f"{', '.join(f'{k}={v}' for k, v in zip(keys, key))}: the published figure's row, not run here")
            continue
        rounds = by_row[key]
        times = [m[time_key] for _, m in rounds.values()]
        accuracy = statistics.median(m["test_accuracy"] for _, m in rounds.values())
        seeds = sorted({int(p["seed"]) for p, _ in rounds.values()})   # round r logs seed base + r
        line = (f"{', '.join(f'{k}={v}' for k, v in zip(keys, key))}: {time_key} median "
                f"{statistics.median(times):.2f} s over {len(times)} rounds, accuracy median {accuracy:.4f} "
                f"over seeds {seeds}")
        assert same(statistics.median(times), float(row[time_key])), (sweep, row, times)
        assert same(accuracy, float(row["test_accuracy"])), (sweep, row)
        checked += 2
        for name in MORE_ACCURACIES:
            if row.get(name):
                more = statistics.median(m[name] for _, m in rounds.values())
                assert same(more, float(row[name])), (sweep, row, name)
                line += f", {name} median {more:.4f}"
                checked += 1
        if baseline is not None and row.get("speedup"):   # the baseline of the row's own series (dp_impl)
            base = by_row[tuple(setting(baseline[k]) if k in baseline else key[i] for i, k in enumerate(keys))]
            shared = sorted(set(base) & set(rounds))
            speedup = (statistics.median(base[r][1][time_key] for r in shared)
                       / statistics.median(rounds[r][1][time_key] for r in shared))
            assert same(speedup, float(row["speedup"])), (sweep, row, speedup)
            line += f", speed-up {speedup:.3f}x over {len(shared)} shared rounds"
            checked += 1
        print(line)

ladder = pathlib.Path(HERE, "jpeg-ladder")
if (ladder / "ladder.csv").exists():
    runs = list(csv.DictReader(open(ladder / "ladder.csv")))
    readme = (ladder / "README.md").read_text()
    print(f"== jpeg-ladder ({len(runs)} runs)")
    for run in runs:
        metrics = dict(db.execute("select key, value from latest_metrics where run_uuid=?", (run["mlflow_run_id"],)))
        params = dict(db.execute("select key, value from params where run_uuid=?", (run["mlflow_run_id"],)))
        assert tag(run["mlflow_run_id"], "harness.sweep") == run["experiment"], run
        assert int(params["seed"]) == int(run["seed"]) and params["dtype"] == run["dtype"], run
        for name in ("test_accuracy", "test_accuracy_no_tta", "train_time_s"):
            assert same(metrics[name], float(run[name])), (run, name)
            checked += 1
        print(f"q{run['jpeg_quality']} seed {run['seed']} ({run['experiment']}): accuracy {metrics['test_accuracy']:.4f}")
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
    # each rung between two others against the chord joining them in ln image bytes, paired by seed
    by_bytes = sorted({(float(r["image_bytes_per_image"]), int(r["jpeg_quality"])) for r in ladder_runs})
    for (b_lo, q_lo), (b, q), (b_hi, q_hi) in zip(by_bytes, by_bytes[1:], by_bytes[2:]):
        w = (math.log(b) - math.log(b_lo)) / (math.log(b_hi) - math.log(b_lo))
        shared = sorted(set(by_seed[q_lo]) & set(by_seed[q]) & set(by_seed[q_hi]))
        median = statistics.median(by_seed[q][s] - (by_seed[q_lo][s] + w * (by_seed[q_hi][s] - by_seed[q_lo][s]))
                                   for s in shared)
        line = next(l for l in readme.splitlines() if l.startswith(f"- Quality {q} against the chord from {q_lo} to {q_hi}"))
        assert f"median **{100 * median:+.2f} points**" in line, (q, median, line)
        print(f"q{q} against the chord from q{q_lo} to q{q_hi}: median {100 * median:+.2f} points over {len(shared)} seeds")
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
    checked += 3
print(f"{checked} figures recomputed from the store, each equal to the committed CSV's")
