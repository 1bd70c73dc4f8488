"""The grid engine: runs a sweep's cells through their experiment, one MLflow child run per cell,
under one parent run per invocation, in this process or in K worker processes.

Claims are always on: every cell is claimed in the shared database (SQLite beside the MLflow store
by default) before it runs, so two sweeps started on one store, or K workers, never run a cell
twice. Idempotency: a cell whose `cell_id` already has a run that finished with outcome `ok` is
reused, not rerun. A cell whose earlier run failed, was skipped or was interrupted is rerun, and
that earlier run is deleted, so the store holds one record per cell. Runs left RUNNING by a killed
process are closed as interrupted before anything else happens.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from tqdm import tqdm

from experiments import make_config
from harness import calibration
from harness.calibration import SPEED_INDEX, drifted
from harness.cells import Cell, CellResult, preflight, run_cell
from harness.distributed.placement import worker_gpu_env
from harness.errors import StoreFault, StoreGone
from harness.launchers import Launcher, LocalLauncher, Progress, WorkerRole, worker_command
from harness.signals import sigterm_as_interrupt
from harness.fingerprint import fingerprint, machine_text
from harness.store import Claims, Outcome, RunRecord, Store
from harness.store.claims import DONE, FAILED, RUNNING
from harness.store.process import this_process
from harness.store.outcome import SUMMARY_ORDER
from harness.store.shared_db import check_url
from harness.store.tracking import DETACHED_HOST, HOST, KIND, PARENT, SCALE, SWEEP
from harness.store.uris import resolve_db_url, store_environment
from harness.sweeps.spec import SweepSpec, expand

Log = Callable[[str], None]
PARENT_SPEED_TAG = f"harness.{SPEED_INDEX}"   # the invocation's speed_index, on its parent run
WAIT_POLL_S = 2.0  # how often a worker with nothing left to take looks at the cells others run


@dataclass
class SweepResult:
    name: str
    scale: str
    parent_run_id: str
    results: list[CellResult]
    seconds: float
    detached: bool = False   # the workers run on as jobs of a launcher that returned at once
    speed_index: float | None = None   # this invocation's calibration (harness/calibration.py)

    def drifted(self) -> list[CellResult]:
        """Reused cells measured at a speed_index further from today's than the noise floor."""
        return [r for r in self.results if r.outcome == Outcome.REUSED
                and drifted(r.metrics.get(SPEED_INDEX), self.speed_index)]

    def count(self, outcome: Outcome | str) -> int:
        return sum(r.outcome == outcome for r in self.results)

    def counts(self) -> dict[str, int]:
        found = Counter(r.outcome for r in self.results)
        return {str(o): found[o] for o in SUMMARY_ORDER if found[o]}


def run_sweep(spec: SweepSpec, store: Store, *, scale: str = "full", overrides: dict[str, Any] | None = None,
              db_url: str | None = None, workers: int = 1, launcher: Launcher | None = None,
              role: WorkerRole | None = None, show_progress: bool = True, log: Log | None = None,
              remeasure_drifted: bool = False, repeats: int | None = None,
              select: Callable[[Cell], bool] | None = None) -> SweepResult:
    """One invocation of a sweep. With `role`, this process is one worker of a launcher's
    invocation and runs its share of the cells under the launcher's parent run.
    `remeasure_drifted`: reused cells measured at another speed_index are run again; `repeats` and
    `select` (harness/sweeps/decide.py): that many rounds, of the cells `select` keeps only."""
    overrides = dict(overrides or {})
    launched = launcher is not None or workers > 1
    if launched and role is None and _fixed_threads(spec, scale, overrides) == 0:
        # Workers get the cores their launcher gives each (K workers on one machine: cores // K);
        # unless the sweep fixes threads (a different thread count is a different measurement, so
        # it is in the cell id).
        overrides["threads"] = (launcher or LocalLauncher()).cores_per_worker(workers)
    cells = expand(spec, scale, overrides, repeats=repeats)
    if select is not None:
        cells = [c for c in cells if select(c)]
    db_url = db_url or resolve_db_url(None, store.uri)
    check_url(db_url)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    started = time.perf_counter()
    if role is not None:
        claims = Claims(db_url, token=role.token)
        speed = _parent_speed(store, experiment_id, spec, role.parent_run_id)
        try:
            with sigterm_as_interrupt():  # a scheduler's stop closes the running cell as interrupted
                results = _work(store, experiment_id, spec, scale, cells, claims, role.parent_run_id,
                                show_progress=show_progress, log=log, speed=speed)
        finally:
            claims.close()
        if role.closes_parent:  # every cell is settled (the workers wait for each other): close it
            parent_start = store.runs(experiment_id, tags={SWEEP: spec.name, KIND: "sweep"})
            since = next((r.start_time for r in parent_start if r.run_id == role.parent_run_id), 0)
            store.end_run(role.parent_run_id, Outcome.OK,
                          tags=_count_tags(_outcomes(store, experiment_id, spec, cells, since_ms=since)))
        return SweepResult(spec.name, scale, role.parent_run_id, results, time.perf_counter() - started)

    records = store.cell_records(experiment_id, spec.name)
    speed = measure_speed()
    if remeasure_drifted:
        _drop_drifted(store, cells, records, speed, log)
    reused = _all_reused(spec, scale, cells, records, started)
    if reused is not None:
        reused.speed_index = speed
        for r in reused.results:
            _note_speed(store, r, speed)
        return reused
    preflight([c.config for c in cells if c.config is not None and not _finished(records.get(c.cell_id, []))])
    tags = {SWEEP: spec.name, SCALE: scale, KIND: "sweep", "harness.cells": str(len(cells))}
    parent = store.start_run(experiment_id, f"{spec.name} ({scale})", tags)
    what = _what_ran(spec, scale, cells, overrides, workers)
    results: list[CellResult] = []
    claims = None
    with sigterm_as_interrupt():
        try:
            store.log_params(parent, {"sweep": spec.name, "scale": scale, "overrides": overrides,
                                      "cells": len(cells), "sweep_file": spec.path, "workers": workers})
            store.describe_run(parent, what)
            # a tag on the parent (a metric there would crowd the chart view of the cells' metrics)
            store.set_tags(parent, {PARENT_SPEED_TAG: f"{speed:.6g}"})
            claims = Claims(db_url)  # also creates the claims table before any worker races to
            if not launched:
                _work(store, experiment_id, spec, scale, cells, claims, parent,
                      records=records, results=results, show_progress=show_progress, log=log, speed=speed)
            else:
                finished = {c.cell_id for c in cells if _finished(records.get(c.cell_id, []))}
                progress = (lambda: _progress(claims, spec, cells, finished)) if show_progress else None
                codes = []
                if len(finished) < len(cells):  # else there is nothing for workers to do
                    codes = _launch(launcher or LocalLauncher(), spec, store, db_url, scale, overrides, workers,
                                    claims.token, parent, log, progress)
                    if codes is None:  # detached: the workers close the parent run when they are done
                        return SweepResult(spec.name, scale, parent, [], time.perf_counter() - started, detached=True)
                _store_still_there(store)
                store.reap_stale_runs(experiment_id)  # a worker killed mid-cell left its run open
                results = _outcomes(store, experiment_id, spec, cells, since_ms=_now_ms(started))
                for r in results:
                    if r.outcome == Outcome.REUSED:
                        _note_speed(store, r, speed)
                for r in results:
                    if r.outcome == Outcome.NOT_RUN and any(codes):  # say why, e.g. jobs that could not start
                        r.reason = (f"no worker ran it; {sum(c != 0 for c in codes)} of {len(codes)} worker(s) "
                                    "exited with an error (their output says why)")
            _store_still_there(store)
            store.end_run(parent, Outcome.OK, tags=_count_tags(results))
        except StoreGone:
            raise  # nothing to close: the runs went with the old file, and its sentence says so
        except StoreFault as fault:
            closed = store.close_after_fault(parent, Outcome.FAILED, f"stopped after {len(results)} of "
                                             f"{len(cells)} cells: {fault}", tags=_count_tags(results))
            raise StoreFault(f"{fault}; the sweep stopped, its finished cells are kept and the same command "
                             "resumes it once the store takes writes again"
                             + ("" if closed else " (the runs it could not close are marked interrupted then)")) from fault
        except BaseException:
            store.close_after_fault(parent, Outcome.INTERRUPTED,
                                    f"interrupted after {len(results)} of {len(cells)} cells", tags=_count_tags(results))
            with contextlib.suppress(Exception):  # best effort: the store may be what failed
                store.describe_run(parent, what + f"\n\n**Interrupted** after {len(results)} of {len(cells)} cells.")
            raise
        finally:
            if claims is not None:
                claims.close()
    result = SweepResult(spec.name, scale, parent, results, time.perf_counter() - started, speed_index=speed)
    store.describe_run(parent, what + "\n\nCells: " + ", ".join(f"{n} {o}" for o, n in result.counts().items())
                       + f", in {result.seconds:.0f} s.")
    return result


def _all_reused(spec: SweepSpec, scale: str, cells: list[Cell], records: dict[str, list[RunRecord]],
                started: float) -> SweepResult | None:
    """An invocation whose every cell is already finished makes no parent run (an empty parent of
    the same name would sit above the real one in the UI); its result names the parent run that
    holds the newest of those cells. None when some cell has work left."""
    done = [_finished(records.get(c.cell_id, [])) for c in cells]
    if not all(done):
        return None
    newest = max(done, key=lambda r: r.start_time)
    results = [CellResult(c, Outcome.REUSED, d.metrics, run_id=d.run_id) for c, d in zip(cells, done)]
    return SweepResult(spec.name, scale, newest.tags.get(PARENT, ""), results, time.perf_counter() - started)


def _work(store: Store, experiment_id: str, spec: SweepSpec, scale: str, cells: list[Cell], claims: Claims,
          parent: str, *, records: dict[str, list[RunRecord]] | None = None,
          results: list[CellResult] | None = None, show_progress: bool, log: Log | None,
          speed: float | None = None) -> list[CellResult]:
    """Take every cell not finished and not claimed by a live process, in grid order; each result
    is appended to `results` as it comes (the caller's list still holds them if this raises)."""
    if records is None:
        records = store.cell_records(experiment_id, spec.name)
    tags = {SWEEP: spec.name, SCALE: scale}
    results = [] if results is None else results
    # No rate: reused cells pass in microseconds, so a cells-per-second figure would mean nothing.
    bar = tqdm(total=len(cells), desc=f"{spec.name} ({scale})", unit="cell", disable=not show_progress,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} cells [{elapsed}{postfix}]")
    try:
        for cell in cells:
            bar.set_postfix_str(cell.label)
            _store_still_there(store)
            result = _take(store, experiment_id, spec, cell, records.get(cell.cell_id, []), claims, tags,
                           parent, show_progress)
            _note_speed(store, result, speed)
            results.append(result)
            if log is not None and result.outcome not in (Outcome.REUSED, Outcome.ELSEWHERE):
                log(f"  {cell.label}: {result.outcome} {result.reason or ''}".rstrip())
            bar.update(1)
    finally:
        bar.close()
    _take_over_from_dead_workers(store, experiment_id, spec, cells, claims, tags, parent, results, log, speed)
    _store_still_there(store)  # the last cell went into the store the sweep opened
    return results


def _store_still_there(store: Store) -> None:
    """Before each cell and at the end: the store is still the file the sweep opened (StoreGone),
    so no cell is run into, or reported as kept by, a deleted store."""
    store.check_still_there()


def _take_over_from_dead_workers(store: Store, experiment_id: str, spec: SweepSpec, cells: list[Cell],
                                 claims: Claims, tags: dict[str, str], parent: str, results: list[CellResult],
                                 log: Log | None, speed: float | None = None) -> None:
    """Wait while other workers of this invocation run their cells; a cell whose worker died (a
    killed job, its claim dropped or its process gone) is taken over and run here."""
    namespace = f"sweep:{spec.name}"
    waiting = [i for i, r in enumerate(results) if r.outcome == Outcome.ELSEWHERE]
    while waiting:
        time.sleep(WAIT_POLL_S)
        for i in list(waiting):
            holder = claims.get(namespace, cells[i].cell_id)
            if holder is not None and holder.state == RUNNING and claims.holder_alive(holder):
                continue  # still being run by a live worker
            waiting.remove(i)
            if holder is not None and holder.state != RUNNING:
                continue  # settled (done or failed) by its worker
            results[i] = _take(store, experiment_id, spec, cells[i], [], claims, tags, parent, False)
            _note_speed(store, results[i], speed)
            if results[i].outcome == Outcome.ELSEWHERE:  # another worker was quicker to take it over
                waiting.append(i)
            elif log is not None:
                log(f"  {cells[i].label}: {results[i].outcome} (taken over from a dead worker) "
                    f"{results[i].reason or ''}".rstrip())


def measure_speed() -> float:
    """This invocation's calibration (about a second; harness/calibration.py)."""
    return calibration.measure()


def _parent_speed(store: Store, experiment_id: str, spec: SweepSpec, parent_id: str) -> float | None:
    """A worker's speed_index: the one its launcher measured and logged on the parent run."""
    for run in store.runs(experiment_id, tags={SWEEP: spec.name, KIND: "sweep"}):
        if run.run_id == parent_id and run.tags.get(PARENT_SPEED_TAG):
            return float(run.tags[PARENT_SPEED_TAG])
    return None


def _note_speed(store: Store, result: CellResult, speed: float | None) -> None:
    """A cell this invocation ran carries today's speed_index; a reused one measured at another
    speed says so in its reason (the sweep's summary names it)."""
    if speed is None:
        return
    if result.outcome == Outcome.REUSED:
        then = result.metrics.get(SPEED_INDEX)
        if drifted(then, speed):
            result.reason = (f"reused from a machine at speed_index {then:.3g}, today {speed:.3g} "
                             f"({calibration.drift(then, speed):.0%} apart)")
    elif result.run_id is not None and result.outcome not in (Outcome.ELSEWHERE, Outcome.BUSY):
        store.log_metrics(result.run_id, {SPEED_INDEX: speed})
        result.metrics[SPEED_INDEX] = speed


def _drop_drifted(store: Store, cells: list[Cell], records: dict[str, list[RunRecord]], speed: float,
                  log: Log | None) -> None:
    """--remeasure-drifted: the finished records measured at another speed_index are deleted, so
    their cells run again in this invocation."""
    for cell in cells:
        done = _finished(records.get(cell.cell_id, []))
        if done is not None and drifted(done.metrics.get(SPEED_INDEX), speed):
            store.delete_run(done.run_id)
            records[cell.cell_id] = [r for r in records[cell.cell_id] if r.run_id != done.run_id]
            if log is not None:
                log(f"  {cell.label}: measured at speed_index {done.metrics[SPEED_INDEX]:.3g}, today {speed:.3g}; "
                    "measured again")


def _progress(claims: Claims, spec: SweepSpec, cells: list[Cell], finished: set[str]) -> tuple[int, int]:
    """Cells settled of all: finished before, or done or failed in this invocation since."""
    held = claims.all(f"sweep:{spec.name}")
    settled = sum(c.cell_id in finished or (c.cell_id in held and (held[c.cell_id].state == DONE or (
        held[c.cell_id].state == FAILED and held[c.cell_id].token == claims.token))) for c in cells)
    return settled, len(cells)


def _take(store: Store, experiment_id: str, spec: SweepSpec, cell: Cell, records: list[RunRecord],
          claims: Claims, tags: dict[str, str], parent: str, show_progress: bool) -> CellResult:
    """Reuse, leave to its live holder, or claim and run one cell."""
    done = _finished(records)
    if done:
        return CellResult(cell, Outcome.REUSED, done.metrics, run_id=done.run_id)
    namespace = f"sweep:{spec.name}"
    grant = claims.claim(namespace, cell.cell_id, retake_done=True, note=cell.label)
    if grant is None:
        holder = claims.get(namespace, cell.cell_id)
        if holder is not None and holder.token == claims.token:
            return CellResult(cell, Outcome.ELSEWHERE, reason="taken by another worker of this invocation")
        where = f"process {holder.pid} on {holder.host}" if holder else "another process"
        return CellResult(cell, Outcome.BUSY, reason=f"being run by {where}")
    try:
        # Read again now that the cell is ours: since the sweep read its records, another process may
        # have run it, or been interrupted in it and freed it (~6 ms on SQLite).
        records = store.cell_records(experiment_id, spec.name, cell.cell_id).get(cell.cell_id, [])
        done = _finished(records)
        if done:
            claims.release(namespace, cell.cell_id, DONE, note=cell.label)
            return CellResult(cell, Outcome.REUSED, done.metrics, run_id=done.run_id)
        for old in records:  # one record per cell: the failed/skipped/interrupted attempt gives way
            if old.status == "RUNNING":  # we hold the claim, so its process is dead (on any host)
                store.end_run(old.run_id, Outcome.INTERRUPTED, "its process stopped without closing this run")
            store.delete_run(old.run_id)
        result = run_cell(store, experiment_id, cell, tags=tags, parent_id=parent, show_epochs=show_progress,
                          system_metrics=spec.system_metrics_on())
    except BaseException:
        with contextlib.suppress(StoreFault):  # else its holder's death frees it for the next invocation
            claims.drop(namespace, cell.cell_id)  # free for the next invocation at once
        raise
    claims.release(namespace, cell.cell_id, DONE if result.outcome == Outcome.OK else FAILED, note=cell.label)
    return result


def _launch(launcher: Launcher, spec: SweepSpec, store: Store, db_url: str, scale: str,
            overrides: dict[str, Any], workers: int, token: str, parent: str, log: Log | None,
            progress: Progress | None) -> list[int] | None:
    import json

    # The store locations travel in the environment (store_environment), never on a command line `ps` shows.
    args = ["sweep", str(spec.path), "--scale", scale]
    for key, value in overrides.items():
        args += ["--set", f"{key}={json.dumps(value) if isinstance(value, list) else value}"]
    if spec.system_metrics is not None:  # the command line's choice, which the file the workers read lacks
        args.append("--system-metrics" if spec.system_metrics else "--no-system-metrics")
    threads = overrides.get("threads") or 1
    roles = [WorkerRole(i, token, parent, closes_parent=launcher.detach) for i in range(workers)]
    if launcher.detach:  # this process leaves: no host's process owns the parent run any more
        store.set_tags(parent, {HOST: DETACHED_HOST})
    if log is not None:
        log(f"sweep {spec.name} ({scale}): {workers} workers, {threads} thread(s) each")
    # Each worker its own cores' worth of threads and its own slice of the GPUs (none here without GPUs).
    envs = [{"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **worker_gpu_env(r.index, workers),
             **store_environment(store.uri, db_url)} for r in roles]
    return launcher.run([worker_command(args, r) for r in roles], envs, progress)


def _outcomes(store: Store, experiment_id: str, spec: SweepSpec, cells: list[Cell], since_ms: int) -> list[CellResult]:
    """After the workers: each cell's one record, read back from the store."""
    records = store.cell_records(experiment_id, spec.name)
    results = []
    for cell in cells:
        found = records.get(cell.cell_id, [])
        done = _finished(found)
        if done:
            outcome = Outcome.OK if done.start_time >= since_ms else Outcome.REUSED
            results.append(CellResult(cell, outcome, done.metrics, run_id=done.run_id))
        elif found:
            r = found[0]
            outcome = Outcome(r.outcome) if r.outcome else Outcome.INTERRUPTED
            results.append(CellResult(cell, outcome, r.metrics, r.reason, r.run_id))
        else:
            results.append(CellResult(cell, Outcome.NOT_RUN, reason="no worker ran it (interrupted?)"))
    return results


def _finished(records: list[RunRecord]) -> RunRecord | None:
    return next((r for r in records if r.finished_ok), None)


def _count_tags(results: list[CellResult]) -> dict[str, int]:
    """Bookkeeping as tags of the parent run (metrics would crowd the UI's charts of the cells)."""
    found = Counter(r.outcome for r in results)
    return {f"harness.cells_{str(o).replace(' ', '_')}": found[o] for o in SUMMARY_ORDER if found[o]}


def _what_ran(spec: SweepSpec, scale: str, cells: list[Cell], overrides: dict[str, Any], workers: int) -> str:
    """The parent run's description: which sweep, at which scale, which cells, on which machine."""
    shown = ", ".join(f"`{c.label}`" for c in cells[:12]) + (f" and {len(cells) - 12} more" if len(cells) > 12 else "")
    changed = ", ".join(f"`{k}={v}`" for k, v in overrides.items()) or "none"
    source = f" Source: {spec.source}." if spec.source else ""
    return (f"**{spec.title}**.{source}\n\n"
            f"Sweep `{spec.name}` at scale **{scale}** from `{spec.path}`: {len(cells)} cells ({shown}); "
            f"overrides: {changed}; {workers} worker process(es).\n\n"
            f"Machine: {this_process().host} ({machine_text(fingerprint())}).")


def _fixed_threads(spec: SweepSpec, scale: str, overrides: dict[str, Any]) -> int | None:
    """The threads every cell shares (0 = all cores), or None when the grid varies them."""
    if "threads" in spec.axes() or isinstance(overrides.get("threads"), list):
        return None
    fixed = {k: v for k, v in spec.fixed(scale, overrides).items() if not isinstance(v, list)}
    return make_config(fixed).threads


def _now_ms(perf_started: float) -> int:
    """The wall-clock time (ms) at which a perf_counter reading was taken."""
    return int((time.time() - (time.perf_counter() - perf_started)) * 1000) - 1000
