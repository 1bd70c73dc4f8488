"""make bench-cells: the harness's own seconds per cell, outside the experiment's `run(cfg)`.

A sweep of N cells of a near-empty experiment (D12.2's matmul on 8x8 matrices, one repeat: a few
milliseconds of `run(cfg)`) into a fresh SQLite MLflow store and claims database, in this process.
Each Store and Claims call is timed and attributed to what it does: creating and closing runs,
params, the config artifact, metrics and tags, claiming, reading records back. What is left is the
engine's own Python. Goal: at most 0.3 s per cell on SQLite.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import experiments
from harness.store import Store
from harness.store.claims import Claims
from harness.sweeps.sweep_engine import run_sweep
from harness.specs.sweep_spec import SweepSpec

# What each timed call counts as.
PARTS = {
    "start_run": "runs (create)", "end_run": "metrics+tags+close (one batch)", "log_params": "params",
    "log_dict": "config artifact", "log_metrics": "per-epoch metrics", "set_tags": "tags",
    "claim": "claim", "release": "claim", "get": "claim",
    "cell_records": "lookups", "sweep_runs": "lookups", "reap_stale_runs": "lookups",
    "delete_run": "old records", "experiment_id": "lookups", "start_run_parent": "runs (create)",
}


def instrument(totals: dict[str, float]):
    """Wrap the Store and Claims methods so each call's seconds add up in `totals`; a call made
    inside another timed call counts to the outer one only (no second count)."""
    depth = [0]

    def wrap(cls, name):
        original = getattr(cls, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            depth[0] += 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    totals[PARTS[name]] += time.perf_counter() - started
        setattr(cls, name, timed)

    for name in ("start_run", "end_run", "log_params", "log_dict", "log_metrics", "set_tags", "cell_records",
                 "sweep_runs", "reap_stale_runs", "delete_run", "experiment_id"):
        wrap(Store, name)
    for name in ("claim", "release", "get"):
        wrap(Claims, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40)
    args = parser.parse_args()
    totals: dict[str, float] = defaultdict(float)
    run_seconds: list[float] = []
    real_get = experiments.get

    def get_timed(name):
        experiment = real_get(name)

        def run(cfg, on_epoch=None):
            started = time.perf_counter()
            try:
                return experiment.run(cfg, on_epoch)
            finally:
                run_seconds.append(time.perf_counter() - started)
        return dataclasses.replace(experiment, run=run)

    experiments.get = get_timed
    spec = SweepSpec(name="bench_cells", title="cell cost", experiment="async",
                     base={"matrix_size": 8, "matmul_iterations": 1, "timing_repeats": 1, "threads": 1},
                     grid={"repeat": list(range(args.cells))})
    with tempfile.TemporaryDirectory(prefix="bench-cells-") as folder:
        uri = f"sqlite:///{Path(folder) / 'mlflow.db'}"
        store = Store(uri)
        # Warm-up: schema creation, the first run's imports and the fingerprint, outside the figures.
        warm = SweepSpec(**{**spec.model_dump(exclude={"path"}), "name": "bench_cells_warmup",
                            "grid": {"repeat": [0, 1]}})
        run_sweep(warm, store, show_progress=False)
        run_seconds.clear()
        instrument(totals)
        started = time.perf_counter()
        result = run_sweep(spec, store, show_progress=False)
        wall = time.perf_counter() - started
    assert result.count("ok") == args.cells, result.counts()
    cells = args.cells
    inside = sum(run_seconds)
    outside = wall - inside
    print(f"{cells} cells of a near-empty experiment (D12.2 on 8x8 matrices), SQLite store and claims, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"  run(cfg) per cell: median {1000 * statistics.median(run_seconds):.1f} ms")
    print(f"  harness per cell, outside run(cfg): {outside / cells:.3f} s  (goal <= 0.3 s)")
    accounted = 0.0
    for part, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        accounted += seconds
        print(f"    {part:<32} {seconds / cells:.4f} s")
    print(f"    {'engine (the rest)':<32} {(outside - accounted) / cells:.4f} s")


if __name__ == "__main__":
    main()
