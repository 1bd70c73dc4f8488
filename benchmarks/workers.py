"""make bench-workers: the same batch of tiny trials with 1 and with 2 worker processes (one torch
thread each), as trials per minute and their ratio. Goal: at least 1.7x with 2 workers. Then the
cost of isolation: the same trials in one worker, each in a fresh process forked from the study's
fork server (isolation = "process") and all in the worker's own process ("none"), as seconds per
trial. Goal: an isolated trial costs at most 0.5 s more.

    make bench-workers ARGS="--trials 4 --epochs 1"      # a quick look (the defaults are for figures)

Each run is the real command (`harness study ... --workers K`) on fresh SQLite stores in a temporary
folder. Two clocks: end to end (the command's wall time, process start-up included) and the trial
window (first trial start to last trial end, from the Optuna storage), which is what extra workers
can speed up. On a shared or loaded machine both move; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

STUDY = textwrap.dedent("""\
    name = "study_bench_workers"
    experiment = "pruning"
    metric = "test_accuracy"
    direction = "maximize"
    n_trials = {n}
    isolation = "{isolation}"
    [space]
    lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
    [sampler]
    name = "random"
    seed = 0
    [base]
    model = "cnn"
    dataset = "synthetic"
    train_limit = 256
    test_limit = 128
    epochs = {epochs}
    warmup_epochs = 0
    batch_size = 64
    threads = 1
    """)


def measure(workers: int, trials: int, epochs: int, folder: Path, isolation: str = "none") -> dict:
    import optuna

    study_file = folder / "study_bench_workers.toml"
    study_file.write_text(STUDY.format(n=trials, epochs=epochs, isolation=isolation))
    uri, url = f"sqlite:///{folder / 'mlflow.db'}", f"sqlite:///{folder / 'optuna.db'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness", "study", str(study_file), "--workers", str(workers),
                    "--tracking-uri", uri, "--storage", url, "--no-progress", "--out", str(folder)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    done = [t for t in optuna.load_study(study_name="study_bench_workers-full", storage=url).trials
            if t.state.name == "COMPLETE"]
    window = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    # Between trials: from one trial's end to the next one's start (asking Optuna, opening the run;
    # with isolation also the fork and the child's start); inside: the trial's own duration.
    ordered = sorted(done, key=lambda t: t.datetime_start)
    gaps = [(b.datetime_start - a.datetime_complete).total_seconds() for a, b in zip(ordered, ordered[1:])]
    inside = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done]
    return {"workers": workers, "trials": len(done), "wall_s": wall, "window_s": window,
            "per_min_wall": 60 * len(done) / wall, "per_min_window": 60 * len(done) / window,
            "trial_s": statistics.median(inside[1:] or inside), "gap_s": statistics.median(gaps or [0.0]),
            "first_trial_s": inside[0], "trials_s": inside}


def isolation_cost(trials: int, epochs: int, rounds: int) -> None:
    """The same trials in one worker, isolated and not, interleaved over `rounds`."""
    rows = {"none": [], "process": []}
    for _ in range(rounds):
        for isolation in rows:
            with tempfile.TemporaryDirectory(prefix="bench-isolation-") as folder:
                rows[isolation].append(measure(1, trials, epochs, Path(folder), isolation))
    print(f"\nisolation: the same {trials} trials in 1 worker, {rounds} round(s) interleaved; seconds per trial "
          f"(median over rounds), load average {os.getloadavg()[0]:.1f}")
    print("trial s: a trial's median duration after the first; first: the first trial's (with isolation it "
          "also waits for the fork server's imports)")
    print(f"{'isolation':>9} {'wall s/trial':>12} {'trial s':>8} {'first s':>8} {'between trials s':>17} {'wall s':>7}")
    med = {}
    for isolation, runs in rows.items():
        med[isolation] = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "trial_s", "gap_s",
                                                                            "first_trial_s")}
        m = med[isolation]
        print(f"{isolation:>9} {m['wall_s'] / trials:>12.2f} {m['trial_s']:>8.2f} {m['first_trial_s']:>8.2f} "
              f"{m['gap_s']:>17.2f} {m['wall_s']:>7.1f}")
    per_trial = (med["process"]["trial_s"] + med["process"]["gap_s"]) - (med["none"]["trial_s"] + med["none"]["gap_s"])
    print(f"an isolated trial costs {per_trial:+.2f} s more than in-process (trial plus the gap before the next; "
          f"goal <= 0.5 s); end to end {(med['process']['wall_s'] - med['none']['wall_s']) / trials:+.2f} s per trial, "
          "the fork server's start included")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs per trial (trial length)")
    parser.add_argument("--rounds", type=int, default=3, help="isolated / in-process pairs, interleaved")
    parser.add_argument("--only", choices=["workers", "isolation"], help="run one of the two measurements")
    args = parser.parse_args()
    if args.only != "workers":
        isolation_cost(args.trials, args.epochs, args.rounds)
    if args.only == "isolation":
        return
    rows = []
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(prefix="bench-workers-") as folder:
            rows.append(measure(workers, args.trials, args.epochs, Path(folder)))
    print(f"{args.trials} trials of the book's CNN on 256 synthetic images, {args.epochs} epochs each, "
          f"1 torch thread per worker; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'workers':>7} {'trials':>6} {'wall s':>8} {'trials/min (wall)':>18} {'window s':>9} "
          f"{'trials/min (window)':>20}")
    for r in rows:
        print(f"{r['workers']:>7} {r['trials']:>6} {r['wall_s']:>8.1f} {r['per_min_wall']:>18.1f} "
              f"{r['window_s']:>9.1f} {r['per_min_window']:>20.1f}")
    one, two = rows
    print(f"ratio 2 workers / 1 worker: {two['per_min_wall'] / one['per_min_wall']:.2f}x end to end, "
          f"{two['per_min_window'] / one['per_min_window']:.2f}x over the trial window (goal >= 1.7x)")


if __name__ == "__main__":
    main()
