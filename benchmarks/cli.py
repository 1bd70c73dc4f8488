"""How fast a mistake is answered: a dozen typical mistakes, each run as `harness ...` in a fresh
process several times, their median wall time printed against `harness --help` and
`python -c "import torch"` measured in the same run, with the ratio to the torch import.

Goal, on an idle machine: every mistake in at most a quarter of the torch import, `harness list`
in at most half of it. Everything a mistake is about (names, keys, values, scales, counts, data
folders, store locations) is checked from the files and the command line before torch, MLflow or
Optuna is imported or any store is opened (tests/test_fast_mistakes.py checks that, untimed). Each
command runs in a folder of its own holding the study files some mistakes name, under
HARNESS_OFFLINE=1 (a dataset not in data_dir is then a mistake, never a download). Timings taken
beside other work are inflated: measure on an idle machine.

    make bench-cli                    # 5 runs of each
    make bench-cli ARGS="--runs 9"
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

MISSING = "/nonexistent/harness-bench-data"   # a data folder no machine has

# (what the user did, the arguments after `harness`); each ends in one sentence and exit status 2.
MISTAKES: list[tuple[str, list[str]]] = [
    ("mistyped sweep", ["sweep", "sparsityy", "--scale", "smoke"]),
    ("unknown --set key", ["sweep", "sparsity", "--scale", "smoke", "--set", "colour=red"]),
    ("--set sparsity=2", ["sweep", "sparsity", "--scale", "smoke", "--set", "sparsity=2"]),
    ("--set lr=abc", ["sweep", "sparsity", "--scale", "smoke", "--set", "lr=abc"]),
    ("a field the experiment never reads", ["sweep", "sparsity", "--scale", "smoke", "--set", "backend=gloo"]),
    ("missing data folder", ["sweep", "sparsity", "--scale", "quick", "--set", "dataset=imagefolder",
                             "--set", f"data_dir={MISSING}"]),
    ("bad scale", ["sweep", "sparsity", "--scale", "smokey"]),
    ("bad --max-cells", ["sweep", "sparsity", "--scale", "smoke", "--max-cells", "0"]),
    ("more cells than --max-cells", ["sweep", "sparsity", "--scale", "smoke", "--set", "sparsity=[0.0,0.1,0.2]",
                                     "--max-cells", "2"]),
    ("unknown study", ["study", "lr_batc", "--scale", "smoke"]),
    ("--n-trials 0", ["study", "lr_batch", "--scale", "smoke", "--n-trials", "0"]),
    ("study, missing data folder", ["study", "lr_batch", "--scale", "smoke", "--set", "dataset=imagefolder",
                                    "--set", f"data_dir={MISSING}"]),
    ("unknown experiment", ["run", "prunning"]),
    ("run with --set epochs=0", ["run", "pruning", "--set", "epochs=0"]),
    ("reproduce, missing data folder", ["reproduce", "--scale", "cpu", "--data-dir", MISSING]),
    ("report of an unknown sweep", ["report", "sparsityy"]),
    ("mistyped command", ["swep"]),
    ("unsupported tracking-URI scheme", ["sweep", "sparsity", "--scale", "smoke", "--tracking-uri", "foo://bar"]),
    ("--storage mysql:// without its driver", ["study", "lr_batch", "--scale", "smoke",
                                               "--storage", "mysql://user:pw@localhost/db"]),
    ("--calibrate-target at an uncalibrated scale", ["study", "speed_recipe", "--calibrate-target", "--scale", "smoke"]),
    ("quick scale without DATASET (offline)", ["sweep", "sparsity", "--scale", "quick"]),
    ("n_trials = 0 in a study file", ["study", "study_zero_trials.toml", "--scale", "smoke"]),
    ("seeds_per_trial = 0 in a study file", ["study", "study_zero_seeds.toml", "--scale", "smoke"]),
    ("--set seed beyond numpy's", ["sweep", "sparsity", "--scale", "smoke", "--set", "seed=99999999999999999999"]),
    ("unknown group of harness list", ["list", "sweep"]),
]
OFFLINE = {"HARNESS_OFFLINE": "1"}


def study_files() -> dict[str, str]:
    """The study files the mistakes above name: the shipped lr_batch with one value out of range."""
    from pathlib import Path

    shipped = (Path(__file__).resolve().parent.parent / "sweeps" / "study_lr_batch.toml").read_text()

    def with_value(key: str, value: str) -> str:
        return "".join(f"{key} = {value}\n" if line.startswith(f"{key} =") else line
                       for line in shipped.splitlines(keepends=True))

    return {"study_zero_trials.toml": with_value("n_trials", "0"),
            "study_zero_seeds.toml": with_value("seeds_per_trial", "0")}


def write_study_files(folder) -> None:
    import os

    for name, text in study_files().items():
        with open(os.path.join(folder, name), "w") as handle:
            handle.write(text)
EXIT_USAGE = 2
GOAL_MISTAKE, GOAL_LIST = 0.25, 0.5   # of the torch import's median


def timed(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, cwd=cwd)
    return time.perf_counter() - start, done.returncode


def median_of(command: list[str], runs: int, env: dict[str, str], cwd: str) -> tuple[float, set[int]]:
    results = [timed(command, env, cwd) for _ in range(runs)]
    return statistics.median(t for t, _ in results), {code for _, code in results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per command (default 5)")
    args = parser.parse_args()
    harness = [sys.executable, "-m", "harness"]
    with tempfile.TemporaryDirectory() as folder:
        # A store of its own, which no mistake may create: the project's mlruns/ is never touched.
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder}/mlflow.db", **OFFLINE}
        write_study_files(folder)
        before = set(os.listdir(folder))
        torch_s, _ = median_of([sys.executable, "-c", "import torch"], args.runs, env, folder)
        rows = [("harness --help", *median_of([*harness, "--help"], args.runs, env, folder), None),
                ("harness list", *median_of([*harness, "list"], args.runs, env, folder), GOAL_LIST)]
        rows += [(label, *median_of([*harness, *argv], args.runs, env, folder), GOAL_MISTAKE)
                 for label, argv in MISTAKES]
        created = sorted(set(os.listdir(folder)) - before)
    print(f"median of {args.runs} fresh processes each; python -c 'import torch': {torch_s:.2f} s")
    print(f"{'command':<44} {'median s':>9} {'/ torch':>8}  goal")
    over = broken = 0
    for label, seconds, codes, goal in rows:
        ratio = seconds / torch_s
        verdict = "" if goal is None else (f"<= {goal:g}  " + ("ok" if ratio <= goal else "OVER"))
        wrong = goal == GOAL_MISTAKE and codes != {EXIT_USAGE}
        print(f"{label:<44} {seconds:>9.3f} {ratio:>8.2f}  {verdict}"
              + (f"  (exit {sorted(codes)}, not {EXIT_USAGE})" if wrong else ""))
        over += goal is not None and ratio > goal
        broken += wrong
    if created:
        print(f"a mistake created {created} in its folder: it opened a store (or a data folder) before it was refused")
    print(f"{over} over the goal (a machine busy with other work inflates every figure); "
          f"{broken} not answered with exit {EXIT_USAGE}")
    return 1 if broken or created else 0


if __name__ == "__main__":
    sys.exit(main())
