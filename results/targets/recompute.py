"""Recompute results/targets/study_speed_recipe-cpu.json from the store beside it, without the harness:
the tuned lr factor (the best accuracy of the lr runs on seed 0), the target (the median of the tuned
factor's best accuracies over the seeds, less the margin) and the fine clock (a check every 2% of the
tuned loop's training samples to the target). Run from the repository root: python3 results/targets/recompute.py
"""
import json, sqlite3, statistics
found = json.load(open("results/targets/study_speed_recipe-cpu.json"))
db = sqlite3.connect("file:results/targets/store/mlflow.db?mode=ro", uri=True)
def metric(run, key):
    return db.execute("select value from latest_metrics where run_uuid=? and key=?", (run, key)).fetchone()[0]
runs = {r["mlflow_run_id"]: r for r in found["runs"]}
lr = {r["lr_factor"]: metric(i, "best_test_accuracy") for i, r in runs.items() if r["step"] == "lr"}
tuned = max(lr, key=lambda f: (lr[f], -f))
bests = [lr[tuned]] + [metric(i, "best_test_accuracy") for i, r in runs.items() if r["step"] == "seed"]
target = round(statistics.median(bests) - found["margin"], 4)
timed = next(i for i, r in runs.items() if r["step"] == "time")
samples = metric(timed, "epochs_to_accuracy") * metric(timed, "train_samples")
every = max(64, int(0.02 * samples))
print("lr factors:", lr, "tuned:", tuned, "bests:", bests)
print("target", target, found["target_accuracy"], "| check every", every, found["check_every_samples"],
      "| reference time", round(metric(timed, "time_to_accuracy_s"), 2))
assert (tuned, target, every) == (found["lr_factor"], found["target_accuracy"], found["check_every_samples"])
