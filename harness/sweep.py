"""The sweep engine: runs the cells of a sweep through one experiment function, one MLflow child run
per cell, and is safe to run again.

Idempotency: a cell whose `cell_id` already has a run that finished with outcome `ok` is reused,
not rerun. A cell whose earlier run failed, was skipped or was interrupted is rerun, and that
earlier run is deleted, so the store holds one record per cell. Runs left RUNNING by a killed
process are closed as interrupted before anything else happens.
"""

from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

import experiments
from harness import tracking
from harness.config import RunConfig
from harness.data import load_splits
from harness.errors import CellPruned, CellSkipped, UserError
from harness.models import MODELS
from harness.sweepspec import Cell, SweepSpec, expand
from harness.timing import peak_rss_mb, reset_peak_rss
from harness.tracking import CELL_ID, FAILED, INTERRUPTED, NOTE_PREFIX, OK, PRUNED, SCALE, SKIPPED, SWEEP, Store
from harness.train import EpochCallback


@dataclass
class CellResult:
    cell: Cell
    outcome: str                     # ok | failed | skipped | reused | busy | pruned
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    run_id: str | None = None


@dataclass
class SweepResult:
    name: str
    scale: str
    parent_run_id: str
    results: list[CellResult]
    seconds: float

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)


def run_cell(store: Store, experiment_id: str, cell: Cell, *, tags: dict[str, str],
             parent_id: str | None = None, show_epochs: bool = True,
             epoch_hook: EpochCallback | None = None) -> CellResult:
    """Run one cell in its own MLflow run; every outcome is recorded, and Ctrl-C/SIGTERM mark the
    run interrupted before propagating. `epoch_hook(epoch, metrics)` runs after each epoch is logged
    (a study's pruner); raising CellPruned there ends the cell as pruned."""
    if cell.config is None:
        run_id = store.start_run(experiment_id, cell.label, {**tags, CELL_ID: cell.cell_id}, parent_id)
        store.log_params(run_id, cell.values)
        store.end_run(run_id, FAILED, cell.error)
        return CellResult(cell, FAILED, reason=cell.error, run_id=run_id)

    cfg = cell.config
    experiment = experiments.get(cfg.experiment)
    run_id = store.start_run(experiment_id, cell.label,
                             {**tags, CELL_ID: cell.cell_id, "harness.clock": experiment.clock}, parent_id)
    store.log_params(run_id, cfg.model_dump())
    store.client.log_dict(run_id, cfg.model_dump(), "config.json")
    bar = tqdm(total=cfg.epochs, desc=f"  {cell.label}", unit="epoch", leave=False,
                disable=not (show_epochs and experiment.needs_dataset))

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        store.log_metrics(run_id, metrics, step=epoch)
        bar.update(1)
        if epoch_hook is not None:
            epoch_hook(epoch, metrics)

    try:
        reset_peak_rss()
        metrics = dict(experiment.run(cfg, on_epoch))
        # A text value (a warning the experiment captured, a dtype) is a tag, not a metric.
        notes = {k: metrics.pop(k) for k in [k for k, v in metrics.items() if isinstance(v, str)]}
        # A multi-process experiment reports its ranks' own figures; this process's are not them.
        metrics.setdefault("peak_rss_mb", peak_rss_mb())
        metrics.setdefault("threads_used", torch.get_num_threads())
        store.end_run(run_id, OK, metrics=metrics,
                      tags={f"{NOTE_PREFIX}{k}": v[:5000] for k, v in notes.items()})
        return CellResult(cell, OK, metrics, run_id=run_id)
    except CellSkipped as err:
        store.end_run(run_id, SKIPPED, str(err))
        return CellResult(cell, SKIPPED, reason=str(err), run_id=run_id)
    except CellPruned as err:
        store.end_run(run_id, PRUNED, str(err))
        return CellResult(cell, PRUNED, reason=str(err), run_id=run_id)
    except Exception as err:  # a failing cell must not end the sweep; its reason is kept
        reason = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
        store.client.log_text(run_id, traceback.format_exc(), "traceback.txt")
        store.end_run(run_id, FAILED, reason)
        return CellResult(cell, FAILED, reason=reason, run_id=run_id)
    except BaseException:
        store.end_run(run_id, INTERRUPTED, "interrupted (Ctrl-C or SIGTERM) while running")
        raise
    finally:
        bar.close()


def preflight(cells: list[Cell]) -> None:
    """Load each dataset the sweep needs once, so a missing folder or an offline download fails
    the whole sweep with one sentence before any run is created. An experiment that makes its own
    inputs (`needs_dataset=False`) needs none."""
    seen = set()
    for cell in cells:
        cfg = cell.config
        if cfg is None or not experiments.get(cfg.experiment).needs_dataset:
            continue
        key = (cfg.dataset, cfg.data_dir, cfg.model, cfg.train_limit, cfg.test_limit, cfg.seed)
        if key not in seen:
            seen.add(key)
            load_splits(cfg.dataset, cfg.data_dir, MODELS[cfg.model].input_shape, seed=cfg.seed,
                        train_limit=cfg.train_limit, test_limit=cfg.test_limit)


def run_sweep(spec: SweepSpec, store: Store, *, scale: str = "full", overrides: dict[str, Any] | None = None,
              show_progress: bool = True) -> SweepResult:
    cells = expand(spec, scale, overrides)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    records = store.cell_records(experiment_id, spec.name)
    preflight([c for c in cells if not _finished(records.get(c.cell_id, []))])

    started = time.perf_counter()
    tags = {SWEEP: spec.name, SCALE: scale}
    parent = store.start_run(experiment_id, f"{spec.name} ({scale})", {**tags, "harness.cells": str(len(cells))})
    store.log_params(parent, {"sweep": spec.name, "scale": scale, "overrides": overrides or {},
                              "cells": len(cells), "sweep_file": spec.path})
    results: list[CellResult] = []
    bar = tqdm(total=len(cells), desc=f"{spec.name} ({scale})", unit="cell", disable=not show_progress)
    previous_handler = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        for cell in cells:
            bar.set_postfix_str(cell.label)
            results.append(_run_or_reuse(store, experiment_id, cell, records.get(cell.cell_id, []),
                                         tags, parent, show_progress))
            bar.update(1)
        store.end_run(parent, OK, metrics={f"cells_{o}": sum(r.outcome == o for r in results)
                                           for o in (OK, FAILED, SKIPPED, "reused", "busy")})
    except BaseException:
        store.end_run(parent, INTERRUPTED, f"interrupted after {len(results)} of {len(cells)} cells")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        bar.close()
    return SweepResult(spec.name, scale, parent, results, time.perf_counter() - started)


def _run_or_reuse(store: Store, experiment_id: str, cell: Cell, records: list[tracking.CellRecord],
                  tags: dict[str, str], parent: str, show_progress: bool) -> CellResult:
    done = _finished(records)
    if done:
        return CellResult(cell, "reused", done.metrics, run_id=done.run_id)
    busy = [r for r in records if r.status == "RUNNING"]
    if busy:  # reap_stale_runs left it open: a live process is running this cell now
        return CellResult(cell, "busy", reason=f"being run by process {busy[0].pid} on {busy[0].host}",
                          run_id=busy[0].run_id)
    for old in records:  # one record per cell: the failed/skipped/interrupted attempt gives way
        store.client.delete_run(old.run_id)
    return run_cell(store, experiment_id, cell, tags=tags, parent_id=parent, show_epochs=show_progress)


def _finished(records: list[tracking.CellRecord]) -> tracking.CellRecord | None:
    return next((r for r in records if r.status == "FINISHED" and r.outcome == OK), None)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_single(cfg: RunConfig, store: Store) -> CellResult:
    """`harness run`: one cell, always run, in an MLflow experiment named after the experiment."""
    experiment_id = store.experiment_id(cfg.experiment)
    store.reap_stale_runs(experiment_id)
    cell = Cell(cfg.model_dump(), f"{cfg.experiment} {cfg.cell_id()[:6]}", cfg)
    preflight([cell])
    return run_cell(store, experiment_id, cell, tags={"harness.kind": "single"})
