"""Recompute this folder's tables from store/ without the harness: for each sweep, the cells of its
newest measurement procedure, grouped by the table's row settings; each row's median time over its
rounds, its median test accuracy over its seeds, and its speed-up over the baseline row, a ratio of
medians over the rounds both rows ran (each round trains one seed for every row, so it pairs them).
Every figure is checked against the CSV the report wrote beside it. The same script serves every
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
print(f"{checked} figures recomputed from the store, each equal to the committed CSV's")
