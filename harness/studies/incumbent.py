"""Trials stopped when they cannot win: a trial of a time-to-accuracy study stops once its training
clock passes k times the incumbent's time to the target (the fastest any trial of the study has
reached it in so far), and is told to Optuna as PRUNED.

Optuna's pruners read intermediate values from `trial.report`, which multi-objective studies do not
support (optuna/optuna#3450, #5270); a speed study has one objective worth pruning on anyway, the
training seconds to the target, and no intermediate value predicts it better than the clock itself.
So the limit is handed to the trial as its `give_up_after_s` before it starts (each trial runs in a
fresh process), and the trial's own accuracy checks stop it there (time_to_accuracy.AccuracyWatch).
The limit is also never more than the calibration's cap (`[target] give_up_after` times the tuned
loop's time), whichever is smaller.

A trial that did not reach the target, stopped at the limit or at the end of its epochs, is PRUNED
with its best accuracy, its clock and the reason as trial attributes: Optuna's samplers rank a
pruned trial below every complete one, which is what a trial that never reached the target is. The
baseline trial is never stopped this way (its time, reached or not, is the study's reference).
"""

from __future__ import annotations

import math
from typing import Any

from harness.specs.study_spec import NOT_REACHED, StudySpec

PRUNED_ATTR = "harness.pruned"   # trial user attribute: {"reason", "best_test_accuracy", "train_time_s", "limit_s"}
LIMIT_ATTR = "harness.limit_s"   # trial user attribute: the training seconds it was given, and why


def applies(spec: StudySpec) -> bool:
    """A study with one objective, a time to a target that a run may not reach."""
    return not spec.multi_objective and spec.metrics[0] in NOT_REACHED and spec.directions[0] == "minimize"


def incumbent(study) -> tuple[int, float] | None:
    """The fastest complete trial's (number, seconds) to the target, or None before one reached it."""
    from optuna.trial import TrialState

    reached = [(t.values[0], t.number) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
               if t.values and math.isfinite(t.values[0])]
    if not reached:
        return None
    seconds, number = min(reached)
    return number, seconds


def limit(spec: StudySpec, study, values: dict[str, Any]) -> tuple[float, str] | None:
    """The training seconds a new trial gets before it is stopped, and why; None: no limit but its epochs."""
    if not applies(spec) or not values.get("target_accuracy"):
        return None
    cap = values.get("give_up_after_s") or math.inf
    found = incumbent(study)
    by_incumbent = spec.prune_after * found[1] if found else math.inf
    if not math.isfinite(min(cap, by_incumbent)):
        return None
    if by_incumbent < cap:
        return by_incumbent, (f"{spec.prune_after:g}x the incumbent's {found[1]:.3g} s to the target "
                              f"(trial {found[0]})")
    return cap, "the cap of [target] give_up_after times the tuned loop's time to the target"


def pruned_reason(metrics: dict[str, float], limit_s: float | None, why: str | None) -> str:
    """Why a trial that did not reach the target stopped, in words."""
    best = metrics.get("best_test_accuracy")
    best_text = f"; its best accuracy {best:.4f}" if best is not None else ""
    clock = metrics.get("train_time_s")
    if metrics.get("gave_up") == 1 and limit_s is not None:
        return f"stopped at {clock:.3g} s of training, past {limit_s:.3g} s ({why}), short of the target{best_text}"
    epochs = metrics.get("epochs_trained")
    return f"did not reach the target in {epochs:g} epoch(s){best_text}" if epochs is not None else \
        f"did not reach the target{best_text}"


def not_reached(spec: StudySpec, metrics: dict[str, float]) -> bool:
    """A complete run of a time-to-accuracy study that did not reach its target."""
    flag = NOT_REACHED.get(spec.metrics[0])
    return applies(spec) and flag is not None and metrics.get(flag) == 0
