"""One study trial in its steps: ask Optuna for a trial, run it as a cell, tell Optuna how it ended.
Each trial is a cell (a RunConfig run through the same `run(cfg)` as a grid cell), logged as an
MLflow child run of the study's parent run with the grid's param and metric names.

The steps are methods, so a study that runs a trial's parameters more than once, or stops a trial
early against its rivals, changes one step and keeps the others: what stops a trial short is
trial_pruning's, what it ends as trial_end's, the slot it runs in trial_slots'.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from harness.cells import run_cell
from harness.invocation import Log
from harness.specs.cell_spec import Cell
from harness.specs.study_spec import StudySpec
from harness.store import Claims, Store
from harness.store.tracking import KIND, SCALE
from harness.studies import baseline, requeue, seeded, trial_end, trial_pruning, warm_starts
from harness.studies.liveness import OWNER_ATTR, SLOT_ATTR
from harness.studies.trial_slots import TrialSlots
from harness.studies.trial_status import INTERRUPTED_ATTR, RETRY_OF, TrialStatus
from harness.studies.trial_tags import RUN_ATTR, STUDY, TRIAL


@dataclass
class TrialSteps:
    """The steps of one trial of a study, with the settings its trials share."""
    spec: StudySpec
    study: Any            # optuna.Study
    store: Store
    experiment_id: str
    scale: str
    fixed: dict[str, Any]
    show_progress: bool
    log: Log
    slots: TrialSlots
    began: float = field(default=0.0, init=False)   # when the latest trial was asked for (monotonic clock)

    def run(self, claims: Claims, slot: str, parent: str, execute=None) -> tuple[TrialStatus, str | None]:
        """Ask for a trial, run it as a cell, tell Optuna how it ended; returns its state and reason."""
        self.began = time.monotonic()
        trial = self.study.ask()
        try:
            cell = self.ask(trial, claims, slot)
            # a trial of several seeds is pruned on its first seed's epochs
            hook = trial_pruning.pruning_hook(self.spec, trial)
            result, spread = seeded.run_seeds(
                self.spec, self.spec.seeds_at(self.scale), cell,
                lambda seed_cell, first: run_cell(self.store, self.experiment_id, seed_cell, tags=self.tags(trial),
                                                  parent_id=parent, show_epochs=self.show_progress,
                                                  epoch_hook=hook if first else None, execute=execute),
                trial_end.objective)
            if spread:
                trial.set_user_attr(seeded.SEEDS_ATTR, spread)
            trial.set_user_attr(RUN_ATTR, result.run_id)
        except BaseException:  # Ctrl-C, SIGTERM, a store fault: the cut-off trial is queued to run again
            # Best effort: if the storage refuses, whoever takes the slot over next does it instead.
            with contextlib.suppress(Exception):
                trial.set_user_attr(INTERRUPTED_ATTR, True)   # counted as interrupted, never as failed
                again = requeue.fail_and_requeue(self.study, trial.number, dict(trial.params), trial.user_attrs)
                self.log(f"  trial {trial.number} interrupted, " + (f"requeued as trial {again}" if again is not None
                                                                   else "not requeued (its retries are spent)"))
            with contextlib.suppress(Exception):
                self.slots.drop(claims, slot)
            raise
        state, reason, line = trial_end.tell(self.spec, self.study, trial, result, self.began)
        if state == TrialStatus.FAIL:
            self.slots.drop(claims, slot)   # a failed trial does not use up a slot
        else:
            self.slots.done(claims, slot, f"trial {trial.number}")
        self.log(line)
        return state, reason

    def ask(self, trial, claims: Claims, slot: str) -> Cell:
        """The trial's cell: its sampled parameters over the study's fixed settings, with its owner,
        slot and cell id recorded on the trial."""
        spec = self.spec
        trial.set_user_attr(OWNER_ATTR, f"{claims.host}|{claims.pid}|{claims.pid_start:.2f}|{claims.owner}")
        trial.set_user_attr(SLOT_ATTR, slot)
        sampled = {name: p.suggest(trial) for name, p in spec.space.items()}
        values = dict(self.fixed)
        for name, value in sampled.items():
            values.update(spec.space[name].fields(value))
        values = baseline.trial_values(spec, self.study, trial, values)
        values = trial_pruning.limited(spec, self.study, trial, values)
        label = f"trial {trial.number}: " + " ".join(
            spec.space[k].optuna_value(v) if spec.space[k].compound else f"{k}={_short(v)}" for k, v in sampled.items())
        if trial.user_attrs.get(baseline.BASELINE_ATTR):
            label += f" ({spec.baseline.name})"
        label += warm_starts.label(trial)
        cell = Cell.build(values, label)
        trial.set_user_attr("cell_id", cell.cell_id)
        return cell

    def tags(self, trial) -> dict[str, str]:
        """The MLflow tags of the trial's run (and a line when it retries an interrupted trial)."""
        tags = {STUDY: self.study.study_name, SCALE: self.scale, KIND: "trial", TRIAL: str(trial.number)}
        if RETRY_OF in trial.user_attrs:
            tags[RETRY_OF] = str(trial.user_attrs[RETRY_OF])
            self.log(f"  trial {trial.number} runs again the parameters of trial {tags[RETRY_OF]}, which was interrupted")
        return tags


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
