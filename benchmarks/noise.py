"""make bench-noise: this machine's noise floor for timing verdicts, measured by an A/A run.

The same short cell (the book's CNN on scikit-learn's digits, real training through the pruning
experiment's `run(cfg)`) is run 2 x N times, each in a fresh process, interleaved as two arms
(round k: A then B), exactly as a sweep's rounds run. Both arms do identical work, so every
difference between them is noise. Printed:

- for each of two clocks of the same runs, the total (train_time_s, the sum of the timed epochs) and
  the steady one (epoch_time_median_s, the median epoch: a few seconds the host took from the
  guest, invisible in /proc/stat's steal here, move the sum but not the median):
- the coefficient of variation (all runs, and of the per-round B/A ratio);
- the minimum detectable effect at n = 3 and n = 5 rounds: the smallest true speed-up that the
  verdict procedure of a timing check (harness/report/intervals.py: ratio of medians, paired
  bootstrap interval; "faster" only when the whole interval is above 1) calls faster in at least 80%
  of random draws of n of the measured rounds, arm B's times divided by 1 + effect;
- the false "faster" rate: how often that procedure calls either arm faster over random A/A splits
  of n rounds (in each drawn round, which run is A is a coin toss).

Each run is a cell as the harness runs one (`harness.cells.run_here`: the `malloc` field applied,
the load watched). `--variants` runs several process set-ups side by side, interleaved in every
round (round k: each variant's A then B), to find where the noise comes from: `harness` (as a sweep
runs a cell: glibc's malloc as it starts); `keep-freed` (malloc=keep_freed: glibc keeps freed memory
from the cell's start, set by mallopt, harness/training/allocator.py); `keep-freed-env` (the same options as
glibc's variables, MALLOC_MMAP_MAX_=0 and a high MALLOC_TRIM_THRESHOLD_, read when the process
starts); `pinned` (OpenMP threads bound to cores); `aslr-off` (address-space randomisation off,
`setarch -R`: a diagnostic only: a fixed layout can make one configuration steadily faster or slower
than another, a bias no number of repeats shows, so a sweep never runs that way); `calibrated` (as
`harness`, then each process measures its own speed_index, harness/machine/calibration.py, after its cell:
its clocks are also shown multiplied by it, each run divided by its own process's speed, to see
whether that lowers the per-round ratio's spread, the noise here being per process).

Goal on an idle 2-core machine: minimum detectable effect at most 5% at n = 5 and at most 5% false
"faster" verdicts. A cell lasts about 20 s (40 epochs of digits), as long as the shortest
training cells of the shipped sweeps: a one-second cell measures the scheduler's jitter, not
the noise a sweep's verdicts face. About 10 minutes at the default N on 2 idle cores; the settings
and the machine's load before and after are printed with the figures (a loaded machine's figures
are its own).

    make bench-noise                      # default N
    make bench-noise ARGS="--rounds 3 --epochs 1"     # a quick try that the benchmark runs
    make bench-noise ARGS="--rounds 8 --variants harness,keep-freed,keep-freed-env"   # where the noise comes from
    make bench-noise ARGS="--variants calibrated"     # each run also divided by its own process's speed_index
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.machine.machine_load import LoadWatch  # noqa: E402
from harness.report import intervals  # noqa: E402

CELL = {"experiment": "pruning", "model": "cnn", "dataset": "digits", "sparsity": 0.0, "warmup_epochs": 1,
        "pretrain_epochs": 0, "batch_size": 64, "optimizer": "adam", "lr": 1e-3, "device": "cpu", "threads": 0}
RUN_ONE = ("import json, os, sys\n"
           "import experiments\n"
           "from experiments import make_config\n"
           "from harness.cells import run_here\n"
           "cfg = make_config(json.loads(sys.argv[1]))\n"
           "metrics = run_here(experiments.get(cfg.experiment), cfg, lambda epoch, m: None)\n"
           "found = {k: metrics[k] for k in sys.argv[2:]}\n"
           "if os.environ.get('BENCH_NOISE_CALIBRATE'):\n"   # the process's own speed, after its cell
           "    from harness.machine.calibration import measure, SPEED_INDEX\n"
           "    found[SPEED_INDEX] = measure()\n"
           "print('RESULT ' + json.dumps(found))\n")
CLOCKS = ("train_time_s", "epoch_time_median_s")
DRAWS = 400          # random draws of n rounds per figure
POWER = 0.80         # a detectable effect is called faster this often
EFFECTS = [e / 1000 for e in range(5, 501, 5)]   # 0.5% to 50%
SEED = 4


KEEP_FREED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}   # glibc's mallopt(3) variables
VARIANTS = {   # name: (command prefix, environment, config values)
    "harness": ([], {}, {}),
    "keep-freed": ([], {}, {"malloc": "keep_freed"}),
    "keep-freed-env": ([], KEEP_FREED_ENV, {}),
    "pinned": ([], {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}, {}),
    "aslr-off": (["setarch", platform.machine(), "-R"], {}, {}),
    # as `harness`, and each process then measures its own speed_index: its times are also printed
    # multiplied by it (seconds in calibration calls), to see whether dividing out the process's
    # speed lowers the per-round ratio's spread (the noise here is per process)
    "calibrated": ([], {"BENCH_NOISE_CALIBRATE": "1"}, {}),
}
CALIBRATED = "speed_index"   # the key a calibrated run adds; its clocks are also shown times it


def run_cell(config: dict, variant: str = "harness") -> dict[str, float]:
    prefix, env, values = VARIANTS[variant]
    config = {**config, **values}
    out = subprocess.run([*prefix, sys.executable, "-c", RUN_ONE, json.dumps(config), *CLOCKS], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return {k: float(v) for k, v in json.loads(line[7:]).items()}
    raise RuntimeError(f"the cell failed: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")


def called_faster(a: list[float], b: list[float]) -> int:
    """+1 when the procedure calls B faster than A (A's median over B's, whole interval above 1),
    -1 when A faster, 0 when inconclusive."""
    ratio = intervals.ratio_of_medians(dict(enumerate(a)), dict(enumerate(b)))
    if not ratio.decided:
        return 0
    return 1 if ratio.lo > 1 else -1 if ratio.hi < 1 else 0


def false_faster_rate(a: np.ndarray, b: np.ndarray, n: int, rng: np.random.Generator) -> float:
    calls = 0
    for _ in range(DRAWS):
        rounds = rng.choice(len(a), n, replace=False)
        swap = rng.random(n) < 0.5
        first = np.where(swap, b[rounds], a[rounds])
        second = np.where(swap, a[rounds], b[rounds])
        calls += called_faster(list(first), list(second)) != 0
    return calls / DRAWS


def detectable_effect(a: np.ndarray, b: np.ndarray, n: int, rng: np.random.Generator) -> float | None:
    """The smallest effect called faster in at least POWER of the draws (None: not within 50%)."""
    draws = [(rng.choice(len(a), n, replace=False), rng.random(n) < 0.5) for _ in range(DRAWS)]
    for effect in EFFECTS:
        hits = 0
        for rounds, swap in draws:
            first = np.where(swap, b[rounds], a[rounds])
            second = np.where(swap, a[rounds], b[rounds]) / (1 + effect)
            hits += called_faster(list(first), list(second)) == 1
        if hits / DRAWS >= POWER:
            return effect
    return None


def clock_figures(clock: str, a: np.ndarray, b: np.ndarray, rounds: int) -> dict:
    """One clock's CV, minimum detectable effects and false 'faster' rates, printed and returned."""
    times = np.concatenate([a, b])
    cv = float(np.std(times, ddof=1) / np.mean(times))
    ratio_cv = float(np.std(np.log(b / a), ddof=1)) if len(a) > 1 else float("nan")
    rng = np.random.default_rng(SEED)
    out = {"cv": cv, "paired_ratio_cv": ratio_cv}
    print(f"{clock}: median {np.median(times):.3f} s, CV {cv:.1%} over {len(times)} runs; "
          f"per-round B/A ratio: CV {ratio_cv:.1%}")
    for n in (3, 5):
        if n > rounds:
            continue
        mde = detectable_effect(a, b, n, rng)
        false = false_faster_rate(a, b, n, rng)
        out[f"mde_n{n}"], out[f"false_faster_n{n}"] = mde, false
        print(f"  n = {n}: minimum detectable effect "
              + (f"{mde:.1%}" if mde is not None else "above 50%")
              + f" (called faster in >= {POWER:.0%} of {DRAWS} draws); false 'faster' on A/A splits {false:.1%}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="N: rounds of A then B (default 10: 20 runs)")
    parser.add_argument("--epochs", type=int, default=40, help="timed epochs of each run (default 40: about 20 s)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--variants", default="harness",
                        help=f"comma-separated process set-ups, interleaved in each round ({', '.join(VARIANTS)})")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        print(f"bench-noise: unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from "
              f"{', '.join(VARIANTS)}.", file=sys.stderr)
        return 2
    if args.rounds < 5:
        print(f"note: --rounds {args.rounds} is below 5: the n = 5 figures need 5 rounds and are left out")
    config = {**CELL, "epochs": args.epochs}
    print(f"bench-noise: {args.rounds} rounds x 2 arms, each run a fresh process: "
          + ", ".join(f"{k}={v}" for k, v in config.items()))
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before")
    if variants != ["harness"]:
        print("variants, interleaved in each round: " + "; ".join(
            f"{v}: {' '.join(VARIANTS[v][0] + [f'{k}={x}' for k, x in {**VARIANTS[v][1], **VARIANTS[v][2]}.items()]) or 'as a sweep runs a cell'}"
            for v in variants))
    watch, started = LoadWatch(), time.perf_counter()
    runs = {v: ([], []) for v in variants}
    for k in range(args.rounds):
        for v in variants:
            a, b = runs[v]
            a.append(run_cell(config, v))
            b.append(run_cell(config, v))
            print(f"  round {k}{'' if variants == ['harness'] else ' ' + v}: " + "; ".join(
                f"{clock} A {a[-1][clock]:.3f} s, B {b[-1][clock]:.3f} s" for clock in CLOCKS), flush=True)
    load = watch.finish()
    figures = {"rounds": args.rounds, "epochs": args.epochs, "seconds": time.perf_counter() - started,
               "load": load}
    print(f"load during the runs: {', '.join(f'{k} {v:.2f}' for k, v in load.items()) or 'not measured'}")
    for v in variants:
        a, b = runs[v]
        if variants != ["harness"]:
            print(f"== variant {v}")
        figures[v] = {"runs": {"A": a, "B": b}}
        for clock in CLOCKS:
            figures[v][clock] = clock_figures(clock, np.array([r[clock] for r in a]), np.array([r[clock] for r in b]),
                                              args.rounds)
        for clock in CLOCKS if all(CALIBRATED in r for r in a + b) else ():
            name = f"{clock} x {CALIBRATED}"
            figures[v][name] = clock_figures(name, *(np.array([r[clock] * r[CALIBRATED] for r in arm]) for arm in (a, b)),
                                             args.rounds)
    if variants == ["harness"]:   # the figures' old shape
        figures.update(figures.pop("harness"))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
