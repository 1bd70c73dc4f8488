"""A study's fixed baseline trial, and the target it hands on to the trials after it.

The baseline (for the speed-recipe study, the book's own loop) is queued before any sampled trial
with Optuna's `enqueue_trial`, so it runs first, in the same study, on the same machine, under
the same clock as the trials it is compared with. With `target_from_epoch = N` it is timed to its
own accuracy at the end of epoch N; once it is complete that accuracy is kept with the study (a
user attribute) and every later trial runs with `target_accuracy` set to it: each is timed to the
accuracy the baseline had after N epochs. A baseline that failed is queued again before the next
trial; a sampled trial never runs without the target.
"""

from __future__ import annotations

from typing import Any

from harness.errors import UserError
from harness.specs.study_spec import StudySpec

BASELINE_ATTR = "harness.baseline"           # trial user attribute: this trial is the baseline
TARGET_ATTR = "harness.target_accuracy"      # study user attribute: the target the baseline set
TRIAL_ATTR = "harness.baseline_trial"        # study user attribute: the baseline's trial number


def queue(spec: StudySpec, study) -> None:
    """Queue the baseline unless it is complete, already queued or running."""
    from optuna.trial import TrialState

    if spec.baseline is None or finished(study) is not None:
        return
    live = study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
    if any(t.user_attrs.get(BASELINE_ATTR) for t in live):
        return
    params = {name: spec.space[name].optuna_value(value) for name, value in spec.baseline.params.items()}
    study.enqueue_trial(params, user_attrs={BASELINE_ATTR: True}, skip_if_exists=False)


def finished(study):
    """The complete baseline trial, or None."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.user_attrs.get(BASELINE_ATTR)]
    return done[0] if done else None


def target(study) -> float | None:
    return study.user_attrs.get(TARGET_ATTR)


def trial_values(spec: StudySpec, study, trial, values: dict[str, Any]) -> dict[str, Any]:
    """A trial's config values with its target: the baseline computes its own (target_from_epoch,
    already in the study's fixed settings), every other trial chases the baseline's."""
    if not spec.targets_from_baseline or trial.user_attrs.get(BASELINE_ATTR) or not values.get("target_from_epoch"):
        return values   # (no target_from_epoch at this scale: the target is calibrated, the same for every trial)
    goal = target(study)
    if goal is None:
        raise UserError(f"study {study.study_name} has no target yet: its baseline trial has not completed")
    return {**values, "target_from_epoch": 0, "target_accuracy": goal}


def record(study, trial, metrics: dict[str, float]) -> None:
    """After a complete trial: if it was the baseline, keep the target it set with the study."""
    if not trial.user_attrs.get(BASELINE_ATTR):
        return
    study.set_user_attr(TRIAL_ATTR, trial.number)
    if "target_accuracy" in metrics:
        study.set_user_attr(TARGET_ATTR, metrics["target_accuracy"])
