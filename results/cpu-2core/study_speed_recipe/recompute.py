"""Recompute the race of study_speed_recipe-cpu-74a1d677 from store/ without the harness: every run's
time to the target and whether it reached it, each role's median over its seeds (a run that did not
reach the target counts as slower than any that did) and the winner's speed-up over the tuned loop.
Run from the repository root: python3 results/cpu-2core/study_speed_recipe/recompute.py
"""
import csv, math, sqlite3, statistics

HERE = "results/cpu-2core/study_speed_recipe"
db = sqlite3.connect(f"file:{HERE}/store/mlflow.db?mode=ro", uri=True)


def metric(run, key):
    row = db.execute("select value from latest_metrics where run_uuid=? and key=?", (run, key)).fetchone()
    return None if row is None else row[0]


rows = list(csv.DictReader(open(f"{HERE}/study_speed_recipe-cpu-74a1d677-verify.csv")))
times = {}
for row in rows:
    reached = metric(row["mlflow_run_id"], "target_reached") == 1.0
    seconds = metric(row["mlflow_run_id"], "time_to_accuracy_s") if reached else math.inf
    assert reached == (row["reached"] == "True"), row
    assert math.isclose(seconds, float(row["time_to_accuracy_s"]), rel_tol=1e-9), row
    times.setdefault(row["role"], []).append(seconds)

race = ["tuned baseline", "winner", "trial 1"]
for role in race:
    print(f"{role:15s} seeds {len(times[role])}, reached {sum(map(math.isfinite, times[role]))}, "
          f"median {statistics.median(times[role]):.1f} s")
speedup = statistics.median(times["tuned baseline"]) / statistics.median(times["winner"])
print(f"winner over the tuned baseline: {speedup:.3f}x")
assert f"**{speedup:.3g}x**" in open(f"{HERE}/study_speed_recipe-cpu-74a1d677-verify.md").read()
