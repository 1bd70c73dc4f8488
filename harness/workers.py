"""Spreading a study or a grid sweep over worker processes and machines.

`--workers K` starts K worker processes of this same command line (each one a separate Python
process with its own torch threads) and waits for them; on other machines the same command with
the same `--storage postgresql://...` and `--tracking-uri http://...` joins in. Workers coordinate
only through the shared database: Optuna's tables for a study, the claims table for who runs which
grid cell or trial slot (harness/claims.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from harness.claims import DONE, FAILED, Claims
from harness.sweepspec import SweepSpec, expand
from harness.train import available_cores


@dataclass
class WorkerArgs:
    index: int
    token: str
    parent_run_id: str | None


def parse_worker(text: str | None) -> WorkerArgs | None:
    """The hidden `--worker INDEX:TOKEN[:PARENT]` a launcher gives each of its workers."""
    if not text:
        return None
    index, token, parent = (text.split(":") + [""])[:3]
    return WorkerArgs(int(index), token, parent or None)


def thread_overrides(overrides: dict[str, Any], resolved_threads: int, workers: int) -> dict[str, Any]:
    """K workers on one machine share its cores: unless threads are fixed, each gets cores // K.
    (A different thread count is a different measurement, so it is part of the config and cell id.)"""
    if workers > 1 and "threads" not in overrides and resolved_threads == 0:
        return {**overrides, "threads": max(1, available_cores() // workers)}
    return overrides


def launch(argv: list[str], workers: int, token: str, parent_run_id: str | None, threads: int) -> list[int]:
    """Run K copies of this command as workers; return their exit codes. Ctrl-C reaches them too
    (same process group); each closes its running trial or cell as interrupted."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    procs = []
    for index in range(workers):
        command = [sys.executable, "-m", "harness", *argv, "--workers", "1", "--no-progress",
                   "--worker", f"{index}:{token}:{parent_run_id or ''}"]
        procs.append(subprocess.Popen(command, env=env))
    try:
        return [p.wait() for p in procs]
    except KeyboardInterrupt:
        # A Ctrl-C at the terminal reached the workers too; give them a moment to close their runs,
        # then pass it on to any that did not get it (the launcher alone was signalled).
        time.sleep(3)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.time() + 30
        for p in procs:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
        raise


# --- grid sweeps over several workers ------------------------------------------------------------
def run_sweep_shared(spec: SweepSpec, store, claims: Claims, *, scale: str, overrides: dict[str, Any],
                     show_progress: bool = False, log=print):
    """One worker's share of a sweep: every cell not finished yet and not claimed by a live worker.
    A cell is claimed before it runs, so no two workers run the same cell; the record-keeping
    (reuse of finished cells, one record per cell) is the single-worker engine's."""
    from harness.sweep import CellResult, SweepResult, _finished, _run_or_reuse, preflight
    from harness.tracking import INTERRUPTED, OK, SCALE, SWEEP

    cells = expand(spec, scale, overrides)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)

    def records_of(cell):
        return store.cell_records(experiment_id, spec.name, cell.cell_id).get(cell.cell_id, [])

    namespace = f"sweep:{spec.name}"
    started = time.perf_counter()
    tags = {SWEEP: spec.name, SCALE: scale}
    parent = store.start_run(experiment_id, f"{spec.name} ({scale}) worker {os.getpid()}",
                             {**tags, "harness.cells": str(len(cells)), "harness.claims": claims.token})
    store.log_params(parent, {"sweep": spec.name, "scale": scale, "overrides": overrides or {},
                              "cells": len(cells), "sweep_file": spec.path})
    results: list[CellResult] = []
    try:
        for cell in cells:
            records = records_of(cell)
            done = _finished(records)
            if done:
                results.append(CellResult(cell, "reused", done.metrics, run_id=done.run_id))
                continue
            if not claims.claim(namespace, cell.cell_id, retake_done=True, note=cell.label):
                results.append(CellResult(cell, "elsewhere", reason="claimed by another worker"))
                continue
            records = records_of(cell)  # finished meanwhile?
            for r in records:  # we hold the claim: a RUNNING record is a dead worker's (any host)
                if r.status == "RUNNING":
                    store.end_run(r.run_id, INTERRUPTED, "its worker stopped without closing this run")
                    r.status = "KILLED"
            if not _finished(records):
                preflight([cell])
            result = _run_or_reuse(store, experiment_id, cell, records, tags, parent, show_progress)
            claims.release(namespace, cell.cell_id, DONE if result.outcome in (OK, "reused") else FAILED,
                           note=cell.label)
            log(f"  {cell.label}: {result.outcome} {result.reason or ''}")
            results.append(result)
        store.end_run(parent, OK, metrics={f"cells_{o}": sum(r.outcome == o for r in results)
                                           for o in (OK, "failed", "skipped", "reused", "elsewhere")})
    except BaseException:
        store.end_run(parent, INTERRUPTED, f"interrupted after {len(results)} of {len(cells)} cells")
        raise
    return SweepResult(spec.name, scale, parent, results, time.perf_counter() - started)


def sweep_outcomes(store, spec: SweepSpec, scale: str, overrides: dict[str, Any]):
    """After all workers: each cell's one record, for the launcher's summary."""
    from harness.sweep import CellResult, _finished

    experiment_id = store.experiment_id(spec.name)
    results = []
    for cell in expand(spec, scale, overrides):
        records = store.cell_records(experiment_id, spec.name, cell.cell_id).get(cell.cell_id, [])
        done = _finished(records)
        if done:
            results.append(CellResult(cell, "ok", done.metrics, run_id=done.run_id))
        elif records:
            r = records[0]
            results.append(CellResult(cell, r.outcome or r.status.lower(), r.metrics, r.reason, r.run_id))
        else:
            results.append(CellResult(cell, "not run", reason="no worker ran it (interrupted?)"))
    return results
