"""Recompute the 2-hour speed-recipe study on this folder's host from store/ without the harness: the
study's trials by state and its budget (Optuna's SQLite), every race run's time to the target and
whether it reached it (MLflow's SQLite), each role's median with its order-statistic interval, the
winner's speed-up over the tuned loop paired by seed with its paired bootstrap interval, and the
goal's verdict; each figure is checked against the committed page.
Run from the repository root: python3 results/cpu-2core/study_speed_recipe-bf16/recompute.py
"""
import csv, json, math, pathlib, random, re, sqlite3, statistics
import sys

# the race's intervals and ratios as the race page computes them, shared by every study folder
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "recompute"))
from race_again import fmt, order_interval, ratio  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
STUDY = "study_speed_recipe-cpu-74a1d677"
page = (HERE / f"{STUDY}-verify.md").read_text()
runs = sqlite3.connect(f"file:{HERE / 'store' / 'mlflow.db'}?mode=ro", uri=True)
study = sqlite3.connect(f"file:{HERE / 'store' / 'optuna.db'}?mode=ro", uri=True)

# --- the study: its trials by state and the budget it spent (study user attributes) ---------------------
(study_id,) = study.execute("select study_id from studies where study_name=?", (STUDY,)).fetchone()
states = dict(study.execute("select state, count(*) from trials where study_id=? group by state", (study_id,)))
attrs = {k: json.loads(v) for k, v in study.execute(
    "select key, value_json from study_user_attributes where study_id=?", (study_id,))}
finished = states.get("COMPLETE", 0) + states.get("PRUNED", 0)
print(f"trials: {states}; complete or pruned: {finished}")
print(f"budget {attrs['harness.budget_s'] / 60:.0f} min, spent {attrs['harness.budget_spent_s'] / 60:.1f} min, "
      f"phase {attrs['harness.phase']}")
assert finished >= 20, "the issue asks for at least 20 trials, completed or pruned"


# --- the race --------------------------------------------------------------------------------------------
def metric(run, key):
    row = runs.execute("select value from latest_metrics where run_uuid=? and key=?", (run, key)).fetchone()
    return None if row is None else row[0]


rows = list(csv.DictReader(open(HERE / f"{STUDY}-verify.csv")))
times = {}                                   # role -> {seed: seconds}, +inf where the run missed the target
for row in rows:
    reached = metric(row["mlflow_run_id"], "target_reached") == 1.0
    seconds = metric(row["mlflow_run_id"], "time_to_accuracy_s") if reached else math.inf
    assert reached == (row["reached"] == "True"), row
    assert math.isclose(seconds, float(row["time_to_accuracy_s"]), rel_tol=1e-9) or not reached, row
    times.setdefault(row["role"], {})[int(row["seed"])] = seconds




race = ["tuned baseline", "winner"] + sorted(r for r in times if r.startswith("trial "))
for role in race:
    values = list(times[role].values())
    lo, hi = order_interval(values)
    # the race table names the winner by its trial ("| trial 83 (winner) |"), the reference "(the reference)"
    line = next(l for l in page.split("## The race", 1)[1].splitlines()
                if (l.startswith(f"| {role} |") and role != "winner") or (role == "winner" and " (winner) |" in l))
    assert f"| {fmt(lo)} to {fmt(hi)} |" in line, (role, lo, hi, line)
    print(f"{role:15s} seeds {sorted(times[role])}, reached {sum(map(math.isfinite, values))}, "
          f"median {statistics.median(values):.1f} s, order-statistic 95% interval {fmt(lo)} to {fmt(hi)} s")

# The speed-up: the ratio of the medians over the seeds both ran, and its paired 95% percentile bootstrap
# (the seeds resampled with their pairs, 2,000 draws of random.Random(0)), as the race page computes it.
tuned, win = times["tuned baseline"], times["winner"]
seeds = sorted(set(tuned) & set(win))
speedup = ratio(statistics.median(tuned[s] for s in seeds), statistics.median(win[s] for s in seeds))
rng = random.Random(0)
draws = []
for _ in range(2000):
    drawn = rng.choices(seeds, k=len(seeds))
    draws.append(ratio(statistics.median(tuned[s] for s in drawn), statistics.median(win[s] for s in drawn)))
draws.sort()
lo, hi = draws[int(0.025 * 2000)], draws[int(0.975 * 2000) - 1]
assert f"**{speedup:.3g}x**, paired by seed over the {len(seeds)} seeds" in page, speedup
assert f"(95% paired bootstrap interval {fmt(lo)}x to {fmt(hi)}x:" in page, (lo, hi)
goal = re.search(r"goal \(at least ([\d.]+)x the tuned baseline, interval's lower bound above ([\d.]+)x, every seed "
                 r"reaching the target\): \*\*(MET|NOT MET)\*\*", page)
met = speedup >= float(goal.group(1)) and lo > float(goal.group(2)) and all(map(math.isfinite, win.values()))
assert goal.group(3) == ("MET" if met else "NOT MET"), goal.group(0)
print(f"winner over the tuned loop: {speedup:.3g}x paired over seeds {seeds}, 95% interval {fmt(lo)}x to {fmt(hi)}x;"
      f" the goal ({goal.group(1)}x, lower bound above {goal.group(2)}x, every seed reaching the target): {goal.group(3)}")
