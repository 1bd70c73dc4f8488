"""How steady the speed index is on this machine: the calibration every sweep invocation runs
(harness/machine/calibration.py), measured in N fresh processes one after another, as a sweep invocation
measures it, with two budgets side by side in each process (their order alternating):
five timed calls, and the full budget (about a second).

For each budget it prints the indices' median, coefficient of variation and range, and its false
drift rate: the share of pairs of these processes, all on the same idle machine minutes apart, that
`calibration.drifted` would call different speeds (DRIFT_TOLERANCE apart). A calibration that is
fit to name drifted cells calls almost none of them drifted.

    make bench-calibration                 # 10 processes
    make bench-calibration ARGS="--processes 20"
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys

BUDGETS = {"5 calls": 0.0, "full budget": None}   # seconds for calibration.measure; None: its default

CHILD = """
import json, sys
import torch
from harness.machine import calibration
torch.set_num_threads(int(sys.argv[1]))
order = json.loads(sys.argv[2])
print(json.dumps({name: calibration.measure(seconds=seconds) for name, seconds in order}))
"""


def one_process(order: list[tuple[str, float | None]], threads: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads), json.dumps(order)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def summary(name: str, indices: list[float]) -> str:
    from harness.machine.calibration import DRIFT_TOLERANCE, drifted

    median = statistics.median(indices)
    cv = statistics.stdev(indices) / statistics.fmean(indices)
    pairs = list(itertools.combinations(indices, 2))
    false_drift = sum(drifted(a, b) for a, b in pairs) / len(pairs)
    return (f"{name:12s} median {median:8.1f}  CV {cv:6.1%}  range {min(indices):.1f}-{max(indices):.1f} "
            f"({max(indices) / min(indices) - 1:.0%} apart)  pairs called drifted (> {DRIFT_TOLERANCE:.0%}): "
            f"{false_drift:.0%} of {len(pairs)}")


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    if args.processes < 3:
        parser.error("--processes must be at least 3")
    from harness.machine.calibration import budget_s
    from harness.machine.machine_load import LoadWatch

    print(f"{args.processes} fresh processes, {args.threads} threads; full budget {budget_s():g} s")
    seen: dict[str, list[float]] = {name: [] for name in BUDGETS}
    watch = LoadWatch()
    for i in range(args.processes):
        order = list(BUDGETS.items()) if i % 2 == 0 else list(reversed(BUDGETS.items()))
        got = one_process(order, args.threads)
        for name, value in got.items():
            seen[name].append(value)
        print(f"  process {i + 1:2d}: " + "  ".join(f"{name} {got[name]:8.1f}" for name in BUDGETS), flush=True)
    load = watch.finish()
    for name, indices in seen.items():
        print(summary(name, indices))
    print(f"other work on the machine meanwhile: {load.get('other_busy_cores', 0.0):.2f} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
