"""make bench-workers: the same batch of tiny trials with 1 and with 2 worker processes (one torch
thread each), as trials per minute and their ratio. Goal: at least 1.7x with 2 workers.

Each run is the real command (`harness study ... --workers K`) on fresh SQLite stores in a temporary
folder. Two clocks: end to end (the command's wall time, process start-up included) and the trial
window (first trial start to last trial end, from the Optuna storage), which is what extra workers
can speed up. On a shared or loaded machine both move; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
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


def measure(workers: int, trials: int, epochs: int, folder: Path) -> dict:
    import optuna

    study_file = folder / "study_bench_workers.toml"
    study_file.write_text(STUDY.format(n=trials, epochs=epochs))
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
    return {"workers": workers, "trials": len(done), "wall_s": wall, "window_s": window,
            "per_min_wall": 60 * len(done) / wall, "per_min_window": 60 * len(done) / window}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs per trial (trial length)")
    args = parser.parse_args()
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
