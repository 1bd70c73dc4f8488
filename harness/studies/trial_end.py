"""How a study trial's cell ended, told to Optuna: the values of its objectives, the state it ends
in (COMPLETE; PRUNED, by the pruner or short of the target; FAIL), what the budget and the report
read off the trial afterwards, and its line in the log. Its slot is the loop's to release.
"""

from __future__ import annotations

import time

from harness.cells import CellResult
from harness.specs.study_spec import NOT_REACHED, StudySpec
from harness.store import Outcome
from harness.studies import baseline, budget, trial_pruning
from harness.studies.trial_status import TrialStatus
from harness.studies.trial_tags import CONTENDED, LOAD_METRICS, METRICS_ATTR, OTHER_CORES


def objective(metric: str, direction: str, metrics: dict[str, float]) -> float | None:
    """The value Optuna is told for one objective: the metric; for a target a complete run did not
    reach (time_to_accuracy_s absent, target_reached 0), the worst value there is; else None."""
    if metric in metrics:
        return metrics[metric]
    flag = NOT_REACHED.get(metric)
    if flag is not None and metrics.get(flag) == 0:
        return float("inf") if direction == "minimize" else float("-inf")
    return None


def tell(spec: StudySpec, study, trial, result: CellResult, began: float) -> tuple[TrialStatus, str | None, str]:
    """Optuna told how the trial's cell ended (`began`: when the trial was asked for, on the
    monotonic clock); returns its state, why it was pruned or failed, and its line for the log."""
    from optuna.trial import TrialState

    values = [objective(m, d, result.metrics) for m, d in zip(spec.metrics, spec.directions)]
    missing = [m for m, v in zip(spec.metrics, values) if v is None]
    if result.outcome == Outcome.OK and missing:
        result.outcome, result.reason = Outcome.FAILED, (
            f"experiment {spec.experiment} returned no metric '{missing[0]}'; it returns {', '.join(sorted(result.metrics))}")
    if result.outcome == Outcome.OK:
        trial.set_user_attr(budget.WALL_ATTR, round(time.monotonic() - began, 2))
        if "train_time_s" in result.metrics:
            trial.set_user_attr(budget.CLOCK_ATTR, result.metrics["train_time_s"])
        if (short := trial_pruning.short_of_target(spec, trial, result.metrics)) is not None:
            result.outcome, result.reason = Outcome.PRUNED, short
            trial.set_user_attr(METRICS_ATTR, _reported(spec, result.metrics))
    if result.outcome == Outcome.OK:
        trial.set_user_attr(METRICS_ATTR, _reported(spec, result.metrics))
        study.tell(trial, values)
        baseline.record(study, trial, result.metrics)
        return TrialStatus.COMPLETE, None, f"  trial {trial.number} complete: {_shown(spec, values, result.metrics)}"
    if result.outcome == Outcome.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
        return TrialStatus.PRUNED, result.reason, f"  trial {trial.number} pruned: {result.reason}"
    study.tell(trial, state=TrialState.FAIL)
    reason = f"{result.outcome}: {result.reason}"
    return TrialStatus.FAIL, reason, f"  trial {trial.number} failed: {reason}"


def _reported(spec: StudySpec, metrics: dict[str, float]) -> dict[str, float]:
    """The metrics the study's report shows of a trial, and the machine's load while it ran."""
    return {m: metrics[m] for m in (*spec.report_metrics, *LOAD_METRICS) if m in metrics}


def _shown(spec: StudySpec, values: list[float | None], metrics: dict[str, float]) -> str:
    """A complete trial's objectives as its log line shows them, and whether other work held the cores."""
    shown = ", ".join(f"{m}={v:.4g}" if abs(v) != float("inf") else f"{m}: not reached"
                      for m, v in zip(spec.metrics, values))
    if metrics.get(CONTENDED) == 1:
        shown += (f" (contended: other work held {metrics.get(OTHER_CORES, 0):.1f} cores while it "
                  "ran, so its time is likely slow)")
    return shown
