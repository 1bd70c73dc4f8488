"""Recompute the race of study_speed_recipe-cpu-74a1d677 from store/ without the harness: every run's
time to the target and whether it reached it, each role's median over its seeds (a run that did not
reach the target counts as slower than any that did) with its order-statistic interval, the winner's
speed-up over the tuned loop with its bootstrap interval, and the goal's verdict.
Run from the repository root: python3 results/cpu-2core/study_speed_recipe/recompute.py
"""
import csv, math, random, re, sqlite3, statistics
import pathlib, sys

# the race's intervals and ratios as the race page computes them, shared by every study folder
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "recompute"))
from race_again import fmt, order_interval, ratio  # noqa: E402

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

# The race's intervals and the goal's verdict, as the race page prints them. Each role's median carries
# the order-statistic 95% interval (the largest j whose coverage 1 - 2 P(Binomial(n, 1/2) < j) is still
# 95%; the range when none is); the winner's speed-up its 95% percentile bootstrap (each role resampled
# on its own, 2,000 draws of random.Random(0), a run that missed the target counted as never arriving).
page = open(f"{HERE}/study_speed_recipe-cpu-74a1d677-verify.md").read()




for role in race:
    lo, hi = order_interval(times[role])
    # the page names the winner by its trial ("| trial 3 (winner) |"), the others by their role
    line = next(l for l in page.splitlines() if l.startswith(f"| {role} |") or (role == "winner" and " (winner) |" in l))
    assert f"| {fmt(lo)} to {fmt(hi)} |" in line, (role, lo, hi, line)
    print(f"{role:15s} order-statistic 95% interval of the median: {fmt(lo)} to {fmt(hi)} s")
rng = random.Random(0)
draws = sorted(ratio(statistics.median(rng.choices(times["tuned baseline"], k=len(times["tuned baseline"]))),
                     statistics.median(rng.choices(times["winner"], k=len(times["winner"])))) for _ in range(2000))
lo, hi = draws[int(0.025 * 2000)], draws[int(0.975 * 2000) - 1]
assert f"(95% bootstrap interval {fmt(lo)}x to {fmt(hi)}x;" in page, (lo, hi)
goal = re.search(r"goal \(at least ([\d.]+)x the tuned baseline, interval's lower bound above ([\d.]+)x, every seed "
                 r"reaching the target\): \*\*(MET|NOT MET)\*\*", page)
met = speedup >= float(goal.group(1)) and lo > float(goal.group(2)) and all(map(math.isfinite, times["winner"]))
assert goal.group(3) == ("MET" if met else "NOT MET"), goal.group(0)
print(f"bootstrap 95% interval {fmt(lo)}x to {fmt(hi)}x; the goal ({goal.group(1)}x, lower bound above "
      f"{goal.group(2)}x, every seed reaching the target): {goal.group(3)}")
