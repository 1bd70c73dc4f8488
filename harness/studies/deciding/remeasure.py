"""One run outside a study's trials, reused when it already finished: what the race, the
verification and the target calibration are made of.

Each is an MLflow run of the study's experiment, tagged with the study, the scale, its kind
(verify, calibrate) and the cell id of its config; a run of the same kind and cell that finished
before on this machine (its fingerprint) is read back instead of run again, so a command cut off
halfway resumes where it was. A run's seed is part of its config, so a race that is run again makes
the same draws and takes the same path. A run from another machine is never reused: a race resumed
there would set one machine's times beside another's.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.cells import run_cell
from harness.machine.fingerprint import FINGERPRINT, fingerprint
from harness.specs.cell_spec import Cell
from harness.store import Outcome, Store
from harness.store.tracking import CELL_ID, KIND, SCALE
from harness.studies.trial_tags import STUDY

TIME = "time_to_accuracy_s"


def finished(store: Store, experiment_id: str, study_name: str, values: dict[str, Any], *, kind: str) -> bool:
    """Whether `values` already has a finished run of this study on this machine: `measured` would
    reuse it, so it costs a budget nothing."""
    return bool(_finished_here(store, experiment_id, study_name, Cell.build(values, ""), kind))


def _finished_here(store: Store, experiment_id: str, study_name: str, cell: Cell, kind: str) -> list:
    """The cell's finished runs of this study and kind on this machine (the same fingerprint)."""
    here = fingerprint()[FINGERPRINT]
    return [r for r in store.runs(experiment_id, tags={STUDY: study_name, KIND: kind, CELL_ID: cell.cell_id})
            if r.finished_ok and r.tags.get(FINGERPRINT) == here]


def measured(store: Store, experiment_id: str, study_name: str, scale: str, values: dict[str, Any], label: str, *,
             kind: str, tags: dict[str, str], trials, show_progress: bool,
             log: Callable[[str], None]) -> tuple[Cell, dict[str, float], str | None]:
    """Run `values` as a cell in the runner `trials` (a fresh process each, studies/isolation.py), or
    reuse the finished run of that cell; returns the cell, its metrics and its run id."""
    cell = Cell.build(values, label)
    done = _finished_here(store, experiment_id, study_name, cell, kind)
    if done:
        log(f"  {label}: reused run {done[0].run_id}")
        return cell, done[0].metrics, done[0].run_id
    result = run_cell(store, experiment_id, cell, tags={STUDY: study_name, SCALE: scale, KIND: kind, **tags},
                      show_epochs=show_progress, execute=trials.execute)
    if result.outcome != Outcome.OK:
        log(f"  {label}: {result.outcome}: {result.reason}")
    elif "target_reached" in result.metrics:
        log(f"  {label}: " + (f"{result.metrics[TIME]:.4g} s" if TIME in result.metrics else "target not reached"))
    return cell, result.metrics, result.run_id
