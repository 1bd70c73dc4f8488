"""Recompute a calibrated target file from its store, without the harness: the lr factor with the best
accuracy (of the lr runs on seed 0), the target (the median of that factor's best accuracies over the
seeds, less the margin) and the fine clock (a check every `resolution`, 2%, of that factor's training
samples to the target in the clock run, whole steps of its batch). A file written since the
calibration times the lr (its "speed" runs) is checked for that too: each timed factor's seconds to
the target on each seed (a run that missed it counts as slower than any that reached it), their
medians, the tuned factor (the lowest median) with a slower neighbour on both sides unless the file
says it is at the grid's edge, and the reference time (the tuned factor's median). A file from before
(lr x32, the committed one until it is calibrated again) has no speed runs: its tuned factor is the
best-accuracy one. Run from the repository root:

    python3 results/targets/recompute.py [FILE.json [mlflow.db]]   (default: study_speed_recipe-cpu.json, store/)
"""
import json, math, sqlite3, statistics, sys

where = sys.argv[1] if len(sys.argv) > 1 else "results/targets/study_speed_recipe-cpu.json"
store = sys.argv[2] if len(sys.argv) > 2 else "results/targets/store/mlflow.db"
found = json.load(open(where))
db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)


def metric(run, key):
    row = db.execute("select value from latest_metrics where run_uuid=? and key=?", (run, key)).fetchone()
    return None if row is None else row[0]


def param(run, key):
    return db.execute("select value from params where run_uuid=? and key=?", (run, key)).fetchone()[0]


def seconds(run):   # a run that did not reach the target is slower than any that did
    return metric(run, "time_to_accuracy_s") if metric(run, "target_reached") == 1.0 else math.inf


rows = found["runs"]
lr = {r["lr_factor"]: metric(r["mlflow_run_id"], "best_test_accuracy") for r in rows if r["step"] == "lr"}
best = max(lr, key=lambda f: (lr[f], -f))
bests = [lr[best]] + [metric(r["mlflow_run_id"], "best_test_accuracy") for r in rows if r["step"] == "seed"]
target = round(statistics.median(bests) - found["margin"], 4)
clock = next(r["mlflow_run_id"] for r in rows if r["step"] == "time")
samples = metric(clock, "epochs_to_accuracy") * metric(clock, "train_samples")
every = max(int(param(clock, "batch_size")), int(found.get("resolution", 0.02) * samples))
print("lr factors:", lr, "best accuracy at:", best, "bests:", bests)
print("target", target, found["target_accuracy"], "| check every", every, found["check_every_samples"])
assert (target, every) == (found["target_accuracy"], found["check_every_samples"])
assert all(param(r["mlflow_run_id"], "check_every_samples") == str(every) for r in rows if r["step"] == "speed")

timed = {}
for r in rows:
    if r["step"] == "speed":
        timed.setdefault(r["lr_factor"], {})[r["seed"]] = seconds(r["mlflow_run_id"])
if not timed:   # a file from before the lr was timed: the best accuracy was the tuned factor
    assert best == found["lr_factor"]
    print("tuned lr (best accuracy, no timing runs):", best, "| clock run's time", round(seconds(clock), 2))
    sys.exit(0)
medians = {f: statistics.median(by_seed.values()) for f, by_seed in sorted(timed.items())}
tuned = min(medians, key=lambda f: (medians[f], f))
for f, by_seed in sorted(timed.items()):
    print(f"x{f:g}: " + ", ".join(f"seed {s} {t:.1f} s" for s, t in by_seed.items()) + f"; median {medians[f]:.1f} s")
print("tuned lr:", tuned, found["lr_factor"], "| reference time", round(medians[tuned], 2),
      found["reference_time_to_target_s"])
assert (best, tuned) == (found["best_accuracy_lr_factor"], found["lr_factor"])
if found["lr_neighbours"]:   # an experiment with an lr of its own: its neighbours were timed too
    assert {best / 2, best, best * 2} <= set(timed) and found["lr_neighbours"] == [tuned / 2, tuned * 2]
    inside = tuned / 2 in medians and tuned * 2 in medians   # both slower: it has the lowest median
    assert found["lr_at_grid_edge"] == (not inside), (found["lr_at_grid_edge"], inside)
assert math.isclose(medians[tuned], found["reference_time_to_target_s"], rel_tol=1e-9)
listed = {row["lr_factor"]: row["time_to_target_s"] for row in found["lr_times_to_target"]}
assert listed == {f: [None if math.isinf(t) else t for t in by_seed.values()] for f, by_seed in timed.items()}
