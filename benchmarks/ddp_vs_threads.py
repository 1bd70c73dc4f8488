"""make bench-ddp: N ranks x t threads against 1 rank x N*t threads on the same total cores.

The same data-parallel training (the book's CNN, DistributedSampler, batch per rank fixed) run
through the harness's own experiment function, so what is compared is exactly what the
sweeps log: the slowest rank's training epochs. Each shape runs `--repeats` times; medians and the
ratio (one rank's time / N ranks' time: above 1 means processes beat threads) are printed.
Only shapes that fit this machine's cores are run.

    python benchmarks/ddp_vs_threads.py [--epochs 2] [--repeats 3] [--dataset digits] [--model cnn]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from experiments import data_parallel, make_config
from harness.machine.hardware import usable_core_count


def shapes(cores: int) -> list[tuple[int, int]]:
    """(ranks, threads) with ranks > 1 and ranks x threads <= cores."""
    return [(n, t) for total in range(2, cores + 1) for n in range(2, total + 1)
            if total % n == 0 and (t := total // n) >= 1 and n * t == total]


def measure(values: dict, repeats: int) -> tuple[float, float]:
    times, accuracies = [], []
    for r in range(repeats):
        metrics = data_parallel.run(make_config({**values, "repeat": r}))
        times.append(metrics["train_time_s"])
        accuracies.append(metrics["test_accuracy"])
    return statistics.median(times), statistics.median(accuracies)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    cores = usable_core_count()
    base = {"experiment": "data_parallel", "model": args.model, "dataset": args.dataset, "epochs": args.epochs,
            "warmup_epochs": 1, "batch_size": args.batch_size, "lr": 1e-3, "backend": "gloo"}
    todo = shapes(cores)
    if not todo:
        print(f"this process may use {cores} core(s): no shape of 2 or more ranks fits", file=sys.stderr)
        return 2
    print(f"{cores} cores, {args.model} on {args.dataset}, {args.epochs} timed epochs, batch {args.batch_size} "
          f"per rank, median of {args.repeats}; time = slowest rank's training epochs")
    print(f"{'shape':>12} {'time_s':>9} {'accuracy':>9} {'vs':>12} {'time_s':>9} {'accuracy':>9} {'ratio':>7}")
    for n, t in todo:
        many, many_acc = measure({**base, "world_size": n, "threads": t}, args.repeats)
        one, one_acc = measure({**base, "world_size": 1, "threads": n * t}, args.repeats)
        print(f"{f'{n} x {t}':>12} {many:9.2f} {many_acc:9.4f} {f'1 x {n * t}':>12} {one:9.2f} {one_acc:9.4f} "
              f"{one / many:6.2f}x")
    print("ratio = (1 rank x N*t threads) / (N ranks x t threads); note that N ranks with a fixed batch per "
          "rank take N times fewer steps per epoch than one rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
