"""What stops a study trial short, decided in three places of its run:

- before it starts, the training seconds it may spend before it cannot win (studies/incumbent.py:
  k times the incumbent's time to the target, or the calibration's cap), handed to it as its
  `give_up_after_s`;
- after each epoch, the study's `[pruner]` (Optuna's), told the epoch's value of its metric;
- when it ends, a complete run that did not reach the target, told to Optuna as PRUNED with why.

The baseline trial is never stopped by the first or the last: its time, reached or not, is the
study's reference.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.errors import CellPruned
from harness.specs.study_spec import StudySpec
from harness.studies import baseline, incumbent


def limited(spec: StudySpec, study, trial, values: dict[str, Any]) -> dict[str, Any]:
    """The trial's values with the training seconds it may spend before it cannot win."""
    if trial.user_attrs.get(baseline.BASELINE_ATTR):   # the baseline's time is the reference: never cut
        return values
    found = incumbent.limit(spec, study, values)
    if found is None:
        return values
    seconds, why = found
    seconds = round(seconds, 3)   # not to 0.1 s: a tiny model's whole time to the target can be less
    trial.set_user_attr(incumbent.LIMIT_ATTR, {"limit_s": seconds, "why": why})
    return {**values, "give_up_after_s": seconds}


def pruning_hook(spec: StudySpec, trial) -> Callable[[int, dict[str, float]], None]:
    """What runs after each epoch of the trial: report to the pruner, and stop when it says so."""
    prune_on, multi_objective = spec.pruner.metric, spec.multi_objective

    def report(epoch: int, metrics: dict[str, float]) -> None:
        if prune_on in metrics and not multi_objective:
            trial.report(metrics[prune_on], epoch)
            if trial.should_prune():
                raise CellPruned(f"pruned after epoch {epoch + 1}: {prune_on} {metrics[prune_on]:.4g}")
    return report


def short_of_target(spec: StudySpec, trial, metrics: dict[str, float]) -> str | None:
    """Why a complete run of a trial (not the baseline) did not reach the target, kept on the trial
    with its best accuracy and clock; None when it reached it, or the study prunes no such run."""
    if trial.user_attrs.get(baseline.BASELINE_ATTR) or not incumbent.not_reached(spec, metrics):
        return None
    given = trial.user_attrs.get(incumbent.LIMIT_ATTR) or {}
    reason = incumbent.pruned_reason(metrics, given.get("limit_s"), given.get("why"))
    trial.set_user_attr(incumbent.PRUNED_ATTR, {"reason": reason, "best_test_accuracy": metrics.get("best_test_accuracy"),
                                                 "train_time_s": metrics.get("train_time_s"),
                                                 "limit_s": given.get("limit_s")})
    return reason
