"""A trial cut off (a worker that died, a Ctrl-C, a store fault) is failed and its parameters are
queued again, at most MAX_RETRY times, so it is retried, not lost. Whoever takes a dead worker's slot
over does this for the trials that worker left RUNNING, and closes their MLflow runs."""

from __future__ import annotations

from typing import Any

from harness.store import Outcome, Store
from harness.store.claims import Claim
from harness.studies import baseline
from harness.studies.liveness import OWNER_ATTR, SLOT_ATTR
from harness.studies.trial_status import RETRY_OF
from harness.studies.trial_tags import RETRIES_ATTR, STUDY, TRIAL, WARM_START_ATTR

MAX_RETRY = 2


def requeue_trials_of(study, store: Store, experiment_id: str, dead: Claim) -> list[str]:
    """The slot we took over belonged to a dead worker: fail the trials it left RUNNING, queue their
    parameters again, and close their MLflow runs (its own process can no longer). Returns one line
    per trial saying what became of it."""
    from optuna.trial import TrialState

    lines = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if str(frozen.user_attrs.get(OWNER_ATTR, "")).split("|")[-1] == dead.owner:
            again = fail_and_requeue(study, frozen.number, dict(frozen.params), frozen.user_attrs)
            lines.append(requeue_line(frozen.number, dead, again))
            for run in store.runs(experiment_id, tags={STUDY: study.study_name, TRIAL: str(frozen.number)},
                                  status="RUNNING"):
                store.end_run(run.run_id, Outcome.INTERRUPTED,
                              f"its worker (process {dead.pid} on {dead.host}) died; the trial is queued again")
    return lines


def requeue_line(number: int, dead: Claim, again: int | None) -> str:
    """What a resumed study says of a trial a dead process left running."""
    fate = f"requeued as trial {again}" if again is not None else \
        f"not requeued (its parameters were retried {MAX_RETRY} times already, or it had none yet)"
    return f"  trial {number} was interrupted (its process {dead.pid} on {dead.host} is gone), {fate}"


def told_before_release(study, slot: str) -> bool:
    """Whether a trial of this slot already finished: its worker told Optuna, then died before it
    could release the slot. Running another would make the study one trial too many."""
    from optuna.trial import TrialState

    return any(t.user_attrs.get(SLOT_ATTR) == slot
               for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def fail_and_requeue(study, number: int, params: dict[str, Any], user_attrs: dict[str, Any]) -> int | None:
    """Fail the trial and queue its parameters again; returns the queued trial's number (None: not queued)."""
    from optuna.trial import TrialState

    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    retries = int(user_attrs.get(RETRIES_ATTR, 0))
    if params and retries < MAX_RETRY:
        # a cut-off baseline stays one, and a cut-off warm start keeps its name
        kept = {k: v for k, v in user_attrs.items() if k in (baseline.BASELINE_ATTR, WARM_START_ATTR)}
        study.enqueue_trial(params, user_attrs={RETRY_OF: number, RETRIES_ATTR: retries + 1, **kept},
                            skip_if_exists=False)
        return _queued_retry_of(study, number)
    return None


def _queued_retry_of(study, number: int) -> int | None:
    """The waiting trial that retries trial `number` (enqueue_trial does not return it)."""
    from optuna.trial import TrialState

    found = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
             if t.user_attrs.get(RETRY_OF) == number]
    return max(found) if found else None
