"""The grid engine: runs a sweep's cells through their experiment, one MLflow child run per cell,
under one parent run per invocation, in this process or in K worker processes (the three modes of
harness/invocation.py; this module is the loop over the cells on top of it).

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
from dataclasses import dataclass, field
from typing import Any, Callable

from tqdm import tqdm

from experiments import make_config
from harness.machine import calibration
from harness.machine.calibration import SPEED_INDEX, SPEED_LOAD, Calibration
from harness.machine.machine_load import CONTENDED, OTHER_CORES
from harness.cells import CellResult, preflight, run_cell
from harness.specs.cell_spec import Cell
from harness.errors import StoreFault
from harness.invocation import Invocation, Log, Stopped
from harness.launchers import Launcher, WorkerRole
from harness.rerun import Rerun, of_invocation
from harness.store import Claims, Outcome, RunRecord, Store
from harness.store.claims import ClaimState
from harness.store.outcome import SUMMARY_ORDER
from harness.store.tracking import KIND, PARENT, SCALE, SWEEP
from harness.store.uris import resolve_db_url
from harness.specs.sweep_job import SweepJob
from harness.specs.sweep_spec import SweepSpec

PARENT_SPEED_TAG = f"harness.{SPEED_INDEX}"   # the invocation's speed_index, on its parent run
PARENT_LOAD_TAG = f"harness.{SPEED_LOAD}"     # and the cores other work held while it was taken
WAIT_POLL_S = 0.5  # how often a worker with nothing left to take looks at the cells others run (a read)


@dataclass
class SweepResult:
    name: str
    scale: str
    parent_run_id: str
    results: list[CellResult]
    seconds: float
    detached: bool = False   # the workers run on as jobs of a launcher that returned at once
    speed: Calibration | None = None   # this invocation's calibration (harness/machine/calibration.py)
    rerun: Rerun | None = None         # the command that measured these cells, for the hints (harness/rerun.py)

    @property
    def speed_index(self) -> float | None:
        return None if self.speed is None else self.speed.index

    def drifted(self) -> list[CellResult]:
        """Reused cells measured at a speed_index further from today's than the index's own noise
        (neither calibration taken under load)."""
        return [r for r in self.results if r.outcome == Outcome.REUSED
                and calibration.differ(calibration.of(r.metrics), self.speed)]

    def contended(self) -> list[CellResult]:
        """The finished cells (run now or reused) timed while other work held their cores."""
        return [r for r in self.results if r.outcome in (Outcome.OK, Outcome.REUSED) and r.metrics.get(CONTENDED) == 1]

    def count(self, outcome: Outcome | str) -> int:
        return sum(r.outcome == outcome for r in self.results)

    def counts(self) -> dict[str, int]:
        found = Counter(r.outcome for r in self.results)
        return {str(o): found[o] for o in SUMMARY_ORDER if found[o]}


def run_sweep(spec: SweepSpec, store: Store, *, scale: str = "full", overrides: dict[str, Any] | None = None,
              repeats: int | None = None, **how) -> SweepResult:
    """run_job for a caller that holds a sweep file and its settings (tests, benchmarks, scripts): the
    job is built here. `how`: run_job's keywords."""
    return run_job(SweepJob.build(spec, scale, overrides, repeats), store, **how)


def run_job(job: SweepJob, store: Store, *, db_url: str | None = None, workers: int = 1,
            launcher: Launcher | None = None, role: WorkerRole | None = None, show_progress: bool = True,
            log: Log | None = None, remeasure_drifted: bool = False, remeasure_contended: bool = False,
            select: Callable[[Cell], bool] | None = None) -> SweepResult:
    """One invocation of a sweep (with `role`, one worker of a launcher's), over the cells its job
    expanded. `remeasure_drifted`: reused cells measured at another speed_index run again;
    `remeasure_contended`: so do those timed while other work held the cores; `select` (decide.py):
    only those cells."""
    run = Invocation("sweep", "cells", store, db_url or resolve_db_url(None, store.uri), workers, launcher, role, log)
    spec, scale = job.spec, job.scale
    # A launcher's workers each get their share of the cores where every cell would take them all:
    # other cells, since the thread count is in a cell's id (else the job's cells, as they came).
    job = job.with_overrides(run.worker_overrides(job.overrides, lambda given: _fixed_threads(spec, scale, given)))
    overrides = job.overrides
    cells = [c for c in job.cells if select is None or select(c)]
    sweep = _Sweep(spec, scale, cells, store, run.open_experiment(spec.name), show_progress, log,
                   rerun=of_invocation(spec, scale, overrides, store.uri))
    if role is not None:  # its share of the cells, timed against the speed_index its launcher measured
        speed = _parent_speed(store, sweep.experiment_id, spec, role.parent_run_id)
        results = run.as_worker(lambda claims: sweep.work(claims, role.parent_run_id, speed=speed),
                                lambda _: sweep.settled_tags(role.parent_run_id))
        return sweep.result(role.parent_run_id, results)
    records, speed = store.cell_records(sweep.experiment_id, spec.name), measure_speed()
    if log is not None and speed.under_load:
        log(f"  calibration: {speed.text()}")
    if remeasure_drifted:
        _drop_finished(store, cells, records, log, lambda done: _drifted_from(done, speed))
    if remeasure_contended:
        _drop_finished(store, cells, records, log, _contended_text)
    if (reused := sweep.all_reused(records, speed)) is not None:
        return reused
    preflight([c.config for c in cells if c.config is not None and not _finished(records.get(c.cell_id, []))])
    parent = store.start_run(sweep.experiment_id, f"{spec.name} ({scale})",
                             {SWEEP: spec.name, SCALE: scale, KIND: "sweep", "harness.cells": str(len(cells))})
    what = run.describe(spec, spec.name, scale, f"{len(cells)} cells ({_shown(cells)})", overrides)
    results: list[CellResult] = []
    with run.as_parent(parent, lambda: sweep.stopped(what, results)) as claims:
        sweep.log_parent(parent, what, overrides, workers, speed)
        if not run.launches:
            sweep.work(claims, parent, records=records, results=results, speed=speed, per_round=True)
        elif (results := sweep.launch(run, claims, parent, records, overrides, speed)) is None:
            return sweep.result(parent, [], detached=True)  # the workers close the parent run when done
        store.check_still_there()  # the last cell went into the store the sweep opened
        store.end_run(parent, Outcome.OK, tags=_count_tags(results))
    result = sweep.result(parent, results, speed=speed)
    store.describe_run(parent, what + "\n\nCells: " + ", ".join(f"{n} {o}" for o, n in result.counts().items())
                       + f", in {result.seconds:.0f} s.")
    return result


@dataclass
class _Sweep:
    """One invocation's cells and where their records go: what the loop over them works with."""
    spec: SweepSpec
    scale: str
    cells: list[Cell]
    store: Store
    experiment_id: str
    show_progress: bool = True
    log: Log | None = None
    rerun: Rerun | None = None
    started: float = field(default_factory=time.perf_counter)

    @property
    def namespace(self) -> str:
        return f"sweep:{self.spec.name}"

    def result(self, parent: str, results: list[CellResult], **extra) -> SweepResult:
        return SweepResult(self.spec.name, self.scale, parent, results, time.perf_counter() - self.started,
                           rerun=self.rerun, **extra)

    def all_reused(self, records: dict[str, list[RunRecord]], speed: Calibration) -> SweepResult | None:
        """An invocation whose every cell is already finished makes no parent run (an empty parent of
        the same name would sit above the real one in the UI); its result names the parent run that
        holds the newest of those cells. None when some cell has work left."""
        done = [_finished(records.get(c.cell_id, [])) for c in self.cells]
        if not all(done):
            return None
        newest = max(done, key=lambda r: r.start_time)
        results = [CellResult(c, Outcome.REUSED, d.metrics, run_id=d.run_id) for c, d in zip(self.cells, done)]
        for r in results:
            _note_speed(self.store, r, speed)
        return self.result(newest.tags.get(PARENT, ""), results, speed=speed)

    def log_parent(self, parent: str, what: str, overrides: dict[str, Any], workers: int,
                   speed: Calibration) -> None:
        """The parent run's params, description and speed_index (a tag: a metric there would crowd
        the chart view of the cells' metrics)."""
        self.store.log_params(parent, {"sweep": self.spec.name, "scale": self.scale, "overrides": overrides,
                                       "cells": len(self.cells), "sweep_file": self.spec.path, "workers": workers})
        self.store.describe_run(parent, what)
        tags = {PARENT_SPEED_TAG: f"{speed.index:.6g}"}
        if speed.other_cores is not None:
            tags[PARENT_LOAD_TAG] = f"{speed.other_cores:.3g}"
        self.store.set_tags(parent, tags)

    def stopped(self, what: str, results: list[CellResult]) -> Stopped:
        """What the parent says when the sweep stops early: how many of its cells it got through."""
        done = f"after {len(results)} of {len(self.cells)} cells"
        return Stopped(f"stopped {done}", f"interrupted {done}", _count_tags(results),
                       what + f"\n\n**Interrupted** {done}.")

    def settled_tags(self, parent: str) -> dict[str, int]:
        """The parent's count tags once every cell is settled: each cell's record read back, those
        started since the parent run counted as run by this invocation."""
        parents = self.store.runs(self.experiment_id, tags={SWEEP: self.spec.name, KIND: "sweep"})
        since = next((r.start_time for r in parents if r.run_id == parent), 0)
        return _count_tags(self.outcomes(since_ms=since))

    def work(self, claims: Claims, parent: str, *, records: dict[str, list[RunRecord]] | None = None,
             results: list[CellResult] | None = None, speed: Calibration | None = None,
             per_round: bool = False) -> list[CellResult]:
        """Take every cell not finished and not claimed by a live process, in grid order; each result
        is appended to `results` as it comes (the caller's list still holds them if this raises).
        `per_round`: calibrate again as each later round starts, so a cell carries the speed of its
        own round and drift within a sweep is seen (workers keep their launcher's one figure)."""
        if records is None:
            records = self.store.cell_records(self.experiment_id, self.spec.name)
        results = [] if results is None else results
        # No rate: reused cells pass in microseconds, so a cells-per-second figure would mean nothing.
        bar = tqdm(total=len(self.cells), desc=f"{self.spec.name} ({self.scale})", unit="cell",
                   disable=not self.show_progress,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} cells [{elapsed}{postfix}]")
        try:
            round_now = None
            for cell in self.cells:
                bar.set_postfix_str(cell.label)
                round_of = getattr(cell.config, "repeat", 0)
                if per_round and round_now is not None and round_of != round_now \
                        and not _finished(records.get(cell.cell_id, [])):
                    speed = measure_speed()
                    if self.log is not None and speed.under_load:
                        self.log(f"  calibration of round {round_of}: {speed.text()}")
                round_now = round_of
                self.store.check_still_there()  # no cell is run into, or reported as kept by, a deleted store
                result = self.take(cell, records.get(cell.cell_id, []), claims, parent, self.show_progress)
                _note_speed(self.store, result, speed)
                results.append(result)
                if self.log is not None and result.outcome not in (Outcome.REUSED, Outcome.ELSEWHERE):
                    self.log(f"  {cell.label}: {result.outcome} {result.reason or ''}".rstrip())
                bar.update(1)
        finally:
            bar.close()
        self.take_over_from_dead_workers(claims, parent, results, speed)
        self.store.check_still_there()  # the last cell went into the store the sweep opened
        return results

    def take_over_from_dead_workers(self, claims: Claims, parent: str, results: list[CellResult],
                                    speed: Calibration | None = None) -> None:
        """Wait while other workers of this invocation run their cells; a cell whose worker died (a
        killed job, its claim dropped or its process gone) is taken over and run here."""
        waiting = [i for i, r in enumerate(results) if r.outcome == Outcome.ELSEWHERE]
        while waiting:
            for i in list(waiting):
                holder = claims.get(self.namespace, self.cells[i].cell_id)
                if holder is not None and holder.state == ClaimState.RUNNING and claims.holder_alive(holder):
                    continue  # still being run by a live worker
                waiting.remove(i)
                if holder is not None and holder.state != ClaimState.RUNNING:
                    continue  # settled (done or failed) by its worker
                results[i] = self.take(self.cells[i], [], claims, parent, False)
                _note_speed(self.store, results[i], speed)
                if results[i].outcome == Outcome.ELSEWHERE:  # another worker was quicker to take it over
                    waiting.append(i)
                elif self.log is not None:
                    self.log(f"  {self.cells[i].label}: {results[i].outcome} (taken over from a dead worker) "
                             f"{results[i].reason or ''}".rstrip())
            if waiting:  # looked at first: cells that ended while this worker ran its own are not waited for
                time.sleep(WAIT_POLL_S)

    def take(self, cell: Cell, records: list[RunRecord], claims: Claims, parent: str,
             show_progress: bool) -> CellResult:
        """Reuse, leave to its live holder, or claim and run one cell."""
        done = _finished(records)
        if done:
            return CellResult(cell, Outcome.REUSED, done.metrics, run_id=done.run_id)
        grant = claims.claim(self.namespace, cell.cell_id, retake_done=True, note=cell.label)
        if grant is None:
            holder = claims.get(self.namespace, cell.cell_id)
            if holder is not None and holder.token == claims.token:
                return CellResult(cell, Outcome.ELSEWHERE, reason="taken by another worker of this invocation")
            where = f"process {holder.pid} on {holder.host}" if holder else "another process"
            return CellResult(cell, Outcome.BUSY, reason=f"being run by {where}")
        try:
            # Read again now that the cell is ours: since the sweep read its records, another process may
            # have run it, or been interrupted in it and freed it (~6 ms on SQLite).
            records = self.store.cell_records(self.experiment_id, self.spec.name, cell.cell_id).get(cell.cell_id, [])
            done = _finished(records)
            if done:
                claims.release(self.namespace, cell.cell_id, ClaimState.DONE, note=cell.label)
                return CellResult(cell, Outcome.REUSED, done.metrics, run_id=done.run_id)
            for old in records:  # one record per cell: the failed/skipped/interrupted attempt gives way
                if old.status == "RUNNING":  # we hold the claim, so its process is dead (on any host)
                    self.store.end_run(old.run_id, Outcome.INTERRUPTED, "its process stopped without closing this run")
                self.store.delete_run(old.run_id)
            result = run_cell(self.store, self.experiment_id, cell, tags={SWEEP: self.spec.name, SCALE: self.scale},
                              parent_id=parent, show_epochs=show_progress, system_metrics=self.spec.system_metrics_on())
        except BaseException:
            with contextlib.suppress(StoreFault):  # else its holder's death frees it for the next invocation
                claims.drop(self.namespace, cell.cell_id)  # free for the next invocation at once
            raise
        claims.release(self.namespace, cell.cell_id, ClaimState.DONE if result.outcome == Outcome.OK else ClaimState.FAILED, note=cell.label)
        return result

    def launch(self, run: Invocation, claims: Claims, parent: str, records: dict[str, list[RunRecord]],
               overrides: dict[str, Any], speed: Calibration) -> list[CellResult] | None:
        """The cells run by the launcher's workers, read back from the store once they are done;
        None when the launcher detached."""
        finished = {c.cell_id for c in self.cells if _finished(records.get(c.cell_id, []))}
        codes: list[int] | None = []
        if len(finished) < len(self.cells):  # else there is nothing for workers to do
            args = [str(self.spec.path), "--scale", self.scale]
            if self.spec.system_metrics is not None:  # the command line's choice, which the file the workers read lacks
                args.append("--system-metrics" if self.spec.system_metrics else "--no-system-metrics")
            progress = (lambda: self.progress(claims, finished)) if self.show_progress else None
            codes = run.launch(f"sweep {self.spec.name} ({self.scale})", args, overrides,
                               threads=overrides.get("threads") or 1, parent=parent, token=claims.token,
                               progress=progress)
            if codes is None:
                return None
        results = self.outcomes(since_ms=_now_ms(self.started))
        for r in results:
            if r.outcome == Outcome.REUSED:
                _note_speed(self.store, r, speed)
            elif r.outcome == Outcome.NOT_RUN and any(codes):  # say why, e.g. jobs that could not start
                r.reason = (f"no worker ran it; {sum(c != 0 for c in codes)} of {len(codes)} worker(s) "
                            "exited with an error (their output says why)")
        return results

    def progress(self, claims: Claims, finished: set[str]) -> tuple[int, int]:
        """Cells settled of all: finished before, or done or failed in this invocation since."""
        held = claims.all(self.namespace)
        settled = sum(c.cell_id in finished or (c.cell_id in held and (held[c.cell_id].state == ClaimState.DONE or (
            held[c.cell_id].state == ClaimState.FAILED and held[c.cell_id].token == claims.token))) for c in self.cells)
        return settled, len(self.cells)

    def outcomes(self, since_ms: int) -> list[CellResult]:
        """After the workers: each cell's one record, read back from the store."""
        records = self.store.cell_records(self.experiment_id, self.spec.name)
        results = []
        for cell in self.cells:
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


def measure_speed() -> Calibration:
    """This invocation's calibration with the load around it (about a second; harness/machine/calibration.py)."""
    return calibration.calibrate()


def _parent_speed(store: Store, experiment_id: str, spec: SweepSpec, parent_id: str) -> Calibration | None:
    """A worker's calibration: the one its launcher measured and logged on the parent run."""
    for run in store.runs(experiment_id, tags={SWEEP: spec.name, KIND: "sweep"}):
        if run.run_id == parent_id and run.tags.get(PARENT_SPEED_TAG):
            load = run.tags.get(PARENT_LOAD_TAG)
            return Calibration(float(run.tags[PARENT_SPEED_TAG]), None if load is None else float(load))
    return None


def _note_speed(store: Store, result: CellResult, speed: Calibration | None) -> None:
    """A cell this invocation ran carries today's calibration; a reused one measured at another
    speed says so in its reason (the sweep's summary names it)."""
    if speed is None:
        return
    if result.outcome == Outcome.REUSED:
        then = calibration.of(result.metrics)
        if calibration.differ(then, speed):
            result.reason = (f"reused from a machine at speed_index {then.index:.3g}, today {speed.index:.3g} "
                             f"({calibration.drift(then.index, speed.index):.0%} apart)")
    elif result.run_id is not None and result.outcome not in (Outcome.ELSEWHERE, Outcome.BUSY):
        store.log_metrics(result.run_id, speed.metrics())
        result.metrics.update(speed.metrics())


def _drifted_from(done: RunRecord, speed: Calibration) -> str | None:
    """Why --remeasure-drifted measures a finished cell again (None: it does not)."""
    then = calibration.of(done.metrics)
    if not calibration.differ(then, speed):
        return None
    return f"measured at speed_index {then.index:.3g}, today {speed.index:.3g}"


def _contended_text(done: RunRecord) -> str | None:
    """Why --remeasure-contended measures a finished cell again (None: it does not)."""
    if done.metrics.get(CONTENDED) != 1:
        return None
    return f"timed while other work held {done.metrics.get(OTHER_CORES, float('nan')):.1f} cores"


def _drop_finished(store: Store, cells: list[Cell], records: dict[str, list[RunRecord]], log: Log | None,
                   why: Callable[[RunRecord], str | None]) -> None:
    """--remeasure-drifted, --remeasure-contended: the finished records `why` names a reason for are
    deleted, as a failed cell's are, so their cells run again in this invocation with one record each."""
    for cell in cells:
        done = _finished(records.get(cell.cell_id, []))
        reason = why(done) if done is not None else None
        if reason:
            store.delete_run(done.run_id)
            records[cell.cell_id] = [r for r in records[cell.cell_id] if r.run_id != done.run_id]
            if log is not None:
                log(f"  {cell.label}: {reason}; measured again")


def _finished(records: list[RunRecord]) -> RunRecord | None:
    return next((r for r in records if r.finished_ok), None)


def _count_tags(results: list[CellResult]) -> dict[str, int]:
    """Bookkeeping as tags of the parent run (metrics would crowd the UI's charts of the cells)."""
    found = Counter(r.outcome for r in results)
    return {f"harness.cells_{str(o).replace(' ', '_')}": found[o] for o in SUMMARY_ORDER if found[o]}


def _shown(cells: list[Cell]) -> str:
    """The first cells by label, for the parent run's description."""
    return ", ".join(f"`{c.label}`" for c in cells[:12]) + (f" and {len(cells) - 12} more" if len(cells) > 12 else "")


def _fixed_threads(spec: SweepSpec, scale: str, overrides: dict[str, Any]) -> int | None:
    """The threads every cell shares (0 = all cores), or None when the grid varies them."""
    if "threads" in spec.axes() or isinstance(overrides.get("threads"), list):
        return None
    fixed = {k: v for k, v in spec.fixed(scale, overrides).items() if not isinstance(v, list)}
    return make_config(fixed).threads


def _now_ms(perf_started: float) -> int:
    """The wall-clock time (ms) at which a perf_counter reading was taken."""
    return int((time.time() - (time.perf_counter() - perf_started)) * 1000) - 1000
