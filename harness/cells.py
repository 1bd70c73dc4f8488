"""One cell: one resolved config, run once through its experiment's `run(cfg)` into one MLflow run.

A grid cell and a study trial are both cells: the sweep engine and the study engine call
`run_cell`, so a cell's params, metrics, tags, clock text and every outcome (ok, failed with its
reason and traceback, skipped, pruned, interrupted) are recorded the same way whichever engine ran it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.errors import CellPruned, CellSkipped, StoreFault, UserError
from harness.machine import hardware
from harness.signals import note_cut_off, raise_if_stopped, stops_held
from harness.store import Outcome, Store
from harness.store.tracking import CELL_ID, CLOCK, NOTE_PREFIX, PROCEDURE, REASON_LIMIT
from harness.specs.cell_spec import Cell
from harness.fields.config import MEASUREMENT_PROCEDURE, RunConfig

EpochHook = Callable[[int, dict[str, float]], None]
# How often MLflow samples system metrics in a cell that asks for them (MLflow's default, 10 s,
# would give a smoke cell no sample at all: its sampler logs only after a full interval).
SYSTEM_METRICS_INTERVAL_S = 2.0


# How a cell's experiment is run: (experiment, cfg, on_epoch) -> metrics, the machine-load metrics
# included. By default here, in this process (`run_here`); a study runs each trial in a fresh one.
Execute = Callable[[Any, RunConfig, Callable[[int, dict], None]], dict[str, float]]


@dataclass
class CellResult:
    cell: Cell
    outcome: Outcome
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    run_id: str | None = None


def run_cell(store: Store, experiment_id: str, cell: Cell, *, tags: dict[str, str],
             parent_id: str | None = None, show_epochs: bool = True,
             epoch_hook: EpochHook | None = None, system_metrics: bool = False,
             execute: Execute | None = None) -> CellResult:
    """Run one cell in its own MLflow run; every outcome is recorded, and Ctrl-C/SIGTERM mark the
    run interrupted before propagating. `epoch_hook(epoch, metrics)` runs after each epoch is logged
    (a study's pruner); raising CellPruned there ends the cell as pruned. `system_metrics`: MLflow
    samples the machine's CPU, memory and GPU use into the run while it trains."""
    import experiments

    raise_if_stopped()   # no new cell after a stop signal, even one whose KeyboardInterrupt was lost
    tags = {**tags, CELL_ID: cell.cell_id, PROCEDURE: str(MEASUREMENT_PROCEDURE)}
    experiment = experiments.get(cell.config.experiment) if cell.config is not None else None
    if experiment is not None:
        tags[CLOCK] = experiment.clock
    with stops_held():   # a KeyboardInterrupt once the run exists but before its id is ours would leave it RUNNING
        run_id = store.start_run(experiment_id, cell.label, tags, parent_id)
    try:
        raise_if_stopped()   # a stop that came while the run was being opened closes it as interrupted
        if experiment is None:
            store.log_params(run_id, cell.values)
            store.end_run(run_id, Outcome.FAILED, cell.error)
            return CellResult(cell, Outcome.FAILED, reason=cell.error, run_id=run_id)
        return _run(store, run_id, cell, experiment, show_epochs, epoch_hook, system_metrics, execute or run_here)
    except (KeyboardInterrupt, SystemExit) as stop:
        note_cut_off(stop, cell.label)
        if not store.close_after_fault(run_id, Outcome.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM) while running"):
            raise StoreFault(f"interrupted, and the store refused to close run {run_id}; the next command on "
                             "this store closes it as interrupted") from None
        raise
    except StoreFault as fault:  # the store stopped taking writes: record what it still takes, then stop
        store.close_after_fault(run_id, Outcome.FAILED, str(fault))
        raise


def run_here(experiment, cfg: RunConfig, on_epoch: Callable[[int, dict], None]) -> dict[str, float]:
    """The experiment run in this process, with how busy the machine was meanwhile."""
    from harness.training import allocator
    from harness.machine.machine_load import LoadWatch

    in_effect = allocator.apply(cfg.malloc)   # before the cell allocates anything of its own
    load = LoadWatch()
    metrics = {**in_effect, **experiment.run(cfg, on_epoch)}
    metrics.update(load.finish())   # other work on the machine while this cell ran (contended = 1)
    return metrics


def _run(store: Store, run_id: str, cell: Cell, experiment, show_epochs: bool,
         epoch_hook: EpochHook | None, system_metrics: bool, execute: Execute) -> CellResult:
    from tqdm import tqdm

    from harness.training.timing import reset_peak_rss

    cfg = cell.config
    epochs = cfg.epochs if experiment.needs_dataset else None  # the others have no epochs to show
    bar = tqdm(total=epochs, desc=f"  {cell.label}", unit="epoch", leave=False,
               disable=not (show_epochs and experiment.needs_dataset))
    try:
        _log_inputs(store, run_id, cfg, experiment)
        reset_peak_rss()
        with store.system_metrics(run_id, system_metrics, SYSTEM_METRICS_INTERVAL_S):
            metrics = dict(execute(experiment, cfg, _epoch_logger(store, run_id, bar, epoch_hook)))
        return _ok(store, run_id, cell, metrics)
    except CellSkipped as err:
        store.end_run(run_id, Outcome.SKIPPED, str(err))
        return CellResult(cell, Outcome.SKIPPED, reason=str(err), run_id=run_id)
    except CellPruned as err:
        store.end_run(run_id, Outcome.PRUNED, str(err))
        return CellResult(cell, Outcome.PRUNED, reason=str(err), run_id=run_id)
    except StoreFault:
        raise
    except Exception as err:  # a failing cell (out of memory too) must not end the sweep; its reason is kept
        reason = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
        store.log_text(run_id, traceback.format_exc(), "traceback.txt")
        store.end_run(run_id, Outcome.FAILED, reason)
        return CellResult(cell, Outcome.FAILED, reason=reason, run_id=run_id)
    finally:
        bar.close()


def _epoch_logger(store: Store, run_id: str, bar, epoch_hook: EpochHook | None) -> Callable[[int, dict], None]:
    """What the experiment calls after each epoch: its metrics logged as that step, the bar moved,
    then the engine's hook (a study's pruner)."""
    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        raise_if_stopped()   # a stop whose first KeyboardInterrupt was swallowed (harness/signals.py)
        store.log_metrics(run_id, metrics, step=epoch)
        raise_if_stopped()   # one that came during the write, which holds stops (harness/store/faults.py)
        bar.update(1)
        if epoch_hook is not None:
            epoch_hook(epoch, metrics)
    return on_epoch


def _log_inputs(store: Store, run_id: str, cfg: RunConfig, experiment) -> None:
    """The cell's params, its whole config, and its data as a dataset input, before it runs."""
    store.log_params(run_id, params_to_log(cfg, experiment))
    store.log_dict(run_id, cfg.model_dump(), "config.json")
    _check_threads(cfg)
    if experiment.needs_dataset:
        from harness.training.dataset_record import describe

        store.log_dataset(run_id, describe(cfg, experiment.data_shape(cfg)))


def _ok(store: Store, run_id: str, cell: Cell, metrics: dict) -> CellResult:
    """The cell's run closed as OK with its metrics; a text value (a warning the experiment
    captured, a dtype) is a tag, not a metric."""
    import torch

    from harness.training.timing import peak_rss_mb
    from harness.training.train import lr_effective

    notes = {k: metrics.pop(k) for k in [k for k, v in metrics.items() if isinstance(v, str)]}
    # A multi-process experiment (or a cell run in another process) reports its own figures;
    # this process's are not them.
    metrics.setdefault("peak_rss_mb", peak_rss_mb())
    metrics.setdefault("threads_used", torch.get_num_threads())
    if (lr := lr_effective(cell.config)) is not None:   # a metric, not a param: the cell's id stays
        metrics.setdefault("lr_effective", lr)
    store.end_run(run_id, Outcome.OK, metrics=metrics,
                  tags={f"{NOTE_PREFIX}{k}": v[:REASON_LIMIT] for k, v in notes.items()})
    return CellResult(cell, Outcome.OK, metrics, run_id=run_id)


def _check_threads(cfg: RunConfig) -> None:
    """More threads than the cores this process may use (os.sched_getaffinity) would time the threads
    queueing for cores, not the method: a skip with the reason, never an ok measurement."""
    cores = hardware.usable_core_count()
    if cfg.threads > cores:
        raise CellSkipped(f"threads={cfg.threads} is more than the {cores} core(s) this process may use "
                          "(os.sched_getaffinity); on this machine it would time contention, not the method")


def params_to_log(cfg: RunConfig, experiment) -> dict[str, Any]:
    """The config fields the cell's experiment reads (its config class's fields: experiment, repeat
    and threads included): MLflow's compare view then lists what could explain a difference. The
    whole resolved config stays in the `config.json` artifact."""
    return {k: v for k, v in cfg.model_dump().items() if k in experiment.reads}


def preflight(configs: list[RunConfig]) -> None:
    """Load each dataset the cells need once, so a missing folder or an offline download fails
    the whole invocation with one sentence before any run is created. An experiment that makes its
    own inputs needs none. Also measure the peaks the training cells' MFU is taken against (once
    per machine, then cached) now, before any cell or worker trains beside the measurement."""
    import experiments
    from harness.training.data import load_splits

    seen = set()
    for cfg in configs:
        _measure_peak(cfg)
        experiment = experiments.get(cfg.experiment)
        if not experiment.needs_dataset:
            continue
        shape = experiment.data_shape(cfg)
        key = (cfg.dataset, cfg.data_dir, shape, cfg.train_limit, cfg.test_limit, cfg.seed)
        if key not in seen:
            seen.add(key)
            load_splits(cfg.dataset, cfg.data_dir, shape, seed=cfg.seed,
                        train_limit=cfg.train_limit, test_limit=cfg.test_limit)


def _measure_peak(cfg: RunConfig) -> None:
    """The peak of the cores the cell will use: its threads, or each rank's (ranks are pinned)."""
    import experiments

    if not experiments.get(cfg.experiment).has_metric("mfu"):
        return
    from harness.distributed.placement import ranks_per_node, threads_per_rank
    from harness.training.peak import peak_flops

    if hardware.missing_gpu(cfg.device):
        return  # the cell itself is skipped, with its reason
    # A config without the distribution fields trains one process; without a dtype, in fp32.
    ranks = ranks_per_node(cfg) if hasattr(cfg, "world_size") else 1
    threads = threads_per_rank(cfg, ranks=ranks)
    if not cfg.device.startswith("cuda") and threads * ranks > hardware.usable_core_count():
        return  # more cores than this machine has: a skip, with its reason
    try:
        peak_flops(cfg.device, getattr(cfg, "dtype", "fp32"), threads=threads)
    except (RuntimeError, ValueError):  # no peak in this dtype here: the cell logs why when it runs
        pass


def run_single(cfg: RunConfig, store: Store) -> CellResult:
    """`harness run`: one cell, always run, in an MLflow experiment named after the experiment."""
    experiment_id = store.experiment_id(cfg.experiment)
    store.reap_stale_runs(experiment_id)
    preflight([cfg])
    cell = Cell(cfg.model_dump(), f"{cfg.experiment} {cfg.cell_id()[:6]}", cfg)
    return run_cell(store, experiment_id, cell, tags={"harness.kind": "single"})
