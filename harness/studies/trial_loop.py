"""One invocation's trials: ask Optuna for a trial, run it as a cell, tell Optuna how it ended, until
the study has its target of finished trials, the timeout has passed, the budget left is what the
race needs, or several trials in a row failed.

Exactly N trials: the target is the study's total of finished (complete or pruned) trials, each
run in one of N slots of the claims table (trial_slots), so K workers on one or many machines
finish exactly N between them.

The loop, `TrialLoop`, holds its parts: the slots (trial_slots), one trial's steps (trial_steps:
ask, run, tell), with what stops a trial short (trial_pruning) and what it is told to have ended as
(trial_end); it keeps what is the loop's own: when to stop, the budget's check before each trial,
and the trials a launcher's workers ran.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import make_config
from harness.cells import preflight
from harness.invocation import Invocation, Log
from harness.specs.study_spec import StudySpec
from harness.store import Claims, Store
from harness.studies import baseline, host_space, isolation, trial_status, warm_starts
from harness.studies.trial_slots import TrialSlots
from harness.studies.trial_status import TrialStatus
from harness.studies.trial_steps import TrialSteps

if TYPE_CHECKING:
    from harness.studies.study_report import StudyReport

MAX_FAILS_IN_A_ROW = 5
WAIT_POLL_S = 0.5  # how often a worker with no slot left looks at the trials its siblings run (a read)


class StopReason(Enum):
    TARGET_REACHED = "target reached"
    TIMEOUT = "timeout"
    BUDGET = "the budget left is what the race needs"
    OTHERS_RUNNING = "every remaining trial is running in another worker"
    TOO_MANY_FAILURES = f"{MAX_FAILS_IN_A_ROW} trials in a row failed"
    WORKERS_FAILED = "a worker exited with an error"
    DETACHED = "the workers run on as detached jobs"

    @property
    def exit_code(self) -> int:
        return 0 if self in (StopReason.TARGET_REACHED, StopReason.TIMEOUT, StopReason.BUDGET,
                             StopReason.OTHERS_RUNNING, StopReason.DETACHED) else 1


@dataclass
class StudyOutcome:
    study_name: str
    target: int
    stop: StopReason
    ran: int = 0                                       # trials this process ran
    states: Counter[TrialStatus] = field(default_factory=Counter)   # their states (complete, pruned, fail)
    last_failure: str | None = None
    finished: int = 0                                  # the study's finished trials at the end
    parent_run_id: str = ""
    budgeted: bool = False                             # the study runs under a wall-clock budget (then races)

    @property
    def exit_code(self) -> int:
        """0 when the study has what was asked (or the timeout said stop), 1 when it fell short."""
        if self.stop.exit_code:
            return self.stop.exit_code
        return 1 if self.stop not in (StopReason.TIMEOUT, StopReason.BUDGET, StopReason.DETACHED) \
            and self.finished < self.target else 0

    def line(self) -> str:
        ran = ", ".join(f"{n} {s}" for s, n in self.states.items()) or "none"
        failure = f"; last failure: {self.last_failure}" if self.last_failure else ""
        return f"ran {self.ran} trial(s) ({ran}); stopped: {self.stop.value}{failure}"

    def count(self, state: TrialStatus, reason: str | None) -> None:
        """One more trial run here, ended in `state` (`reason`: why it failed)."""
        self.ran += 1
        self.states[state] += 1
        if state == TrialStatus.FAIL:
            self.last_failure = reason


@dataclass
class TrialLoop:
    """One invocation's study and the settings its trials share, and the loop over them."""
    spec: StudySpec
    study: Any            # optuna.Study
    store: Store
    experiment_id: str
    scale: str
    fixed: dict[str, Any]
    target: int           # finished trials the study is to have
    timeout: float | None
    show_progress: bool
    log: Log
    # with a budget (studies/search_budget.py): says why no further trial starts (None: one may), and
    # is told each trial's wall clock
    search_budget: Any = None
    slots: TrialSlots = field(init=False)
    steps: TrialSteps = field(init=False)

    def __post_init__(self) -> None:
        self.slots = TrialSlots(self.study, self.store, self.experiment_id, self.target, self.log)
        self.steps = TrialSteps(self.spec, self.study, self.store, self.experiment_id, self.scale, self.fixed,
                                self.show_progress, self.log, self.slots)

    # --- this process's trials --------------------------------------------------------------------
    def work(self, claims: Claims, parent: str) -> StudyOutcome:
        """Trials in this process (the one process, or one worker), under `parent`."""
        deadline = time.monotonic() + self.timeout if self.timeout else None
        outcome = StudyOutcome(self.study.study_name, self.target, StopReason.TARGET_REACHED)
        runner = isolation.runner(self.spec.trial_isolation)   # a fork server starts importing now, if isolated
        try:
            preflight([make_config(self.fixed)])
            outcome.stop = self._loop(claims, parent, outcome, runner.execute, deadline)
        finally:
            runner.close()
        outcome.finished = self.slots.finished(claims)
        return outcome

    def _loop(self, claims: Claims, parent: str, outcome: StudyOutcome, execute, deadline: float | None) -> StopReason:
        """Trials until a reason to stop, which it returns."""
        fails_in_a_row = 0
        while True:
            if deadline and time.monotonic() > deadline:
                return StopReason.TIMEOUT
            held = claims.all(self.slots.namespace)
            if self.slots.finished(claims, held) >= self.target:
                return StopReason.TARGET_REACHED
            slot, grant = self.slots.claim(claims, held)
            if slot is None:
                if self.slots.siblings_running(claims, held):  # wait: if one of them dies, its slot is taken over here
                    time.sleep(WAIT_POLL_S)
                    continue
                return StopReason.OTHERS_RUNNING
            if grant.previous is not None and self.slots.took_over(claims, slot, grant.previous):
                continue
            if self.search_budget is not None and (why := self.search_budget.stop_search()):
                self.slots.drop(claims, slot)
                self.log(f"  no more trials: {why}")
                return StopReason.BUDGET
            baseline.queue(self.spec, self.study)  # a study with a baseline runs it first (again, if it failed)
            warm_starts.queue(self.spec, self.study, self.scale, self.log)   # then its warm starts, once
            self.store.check_still_there()  # no trial is run into, or counted by, a deleted store
            state, reason = self.steps.run(claims, slot, parent, execute)
            if self.search_budget is not None:
                self.search_budget.spend(time.monotonic() - self.steps.began)
            outcome.count(state, reason)
            fails_in_a_row = fails_in_a_row + 1 if state == TrialStatus.FAIL else 0
            if fails_in_a_row >= MAX_FAILS_IN_A_ROW:
                return StopReason.TOO_MANY_FAILURES

    # --- the trials of a launcher's workers, and the report ---------------------------------------
    def launch(self, run: Invocation, claims: Claims, parent: str, overrides: dict[str, Any]) -> StudyOutcome:
        """The trials run by the launcher's workers, read back from the study once they are done; the
        outcome's stop is DETACHED when the launcher left them running."""
        name, target, timeout = self.study.study_name, self.target, self.timeout
        codes: list[int] | None = []
        before = {t.number for t in self.study.get_trials(deepcopy=False)}
        if self.slots.finished(claims) < target:  # else there is nothing for workers to do
            args = [str(self.spec.path), "--scale", self.scale, "--n-trials", str(target),
                    *(["--timeout", str(timeout)] if timeout else []), *host_space.worker_args(self.spec)]
            progress = (lambda: (self.slots.finished(claims), target)) if self.show_progress else None
            codes = run.launch(f"study {name}", args, overrides, threads=make_config(self.fixed).threads or 1,
                               parent=parent, token=claims.token, progress=progress)
        if codes is None:
            return StudyOutcome(name, target, StopReason.DETACHED, parent_run_id=parent)
        stop = StopReason.WORKERS_FAILED if any(codes) else StopReason.TIMEOUT if timeout else StopReason.TARGET_REACHED
        outcome = StudyOutcome(name, target, stop)
        _count_workers_trials(self.study, outcome, before)
        return outcome

    def report(self, outcome: StudyOutcome, parent: str, out_dir: Path | None) -> tuple[StudyReport, list[Path]]:
        """The study's report (best trials, Pareto front), written beside the parent run; the
        outcome's count of finished trials is the study's from then on."""
        from harness.studies import study_report

        report = study_report.build(self.spec, self.study)
        outcome.finished = report.counts[TrialStatus.COMPLETE] + report.counts[TrialStatus.PRUNED]
        outcome.parent_run_id = parent
        return report, study_report.write(self.spec, report, self.store, parent, out_dir)


def _count_workers_trials(study, outcome: StudyOutcome, before: set[int]) -> None:
    """The trials this invocation's workers ran (every trial settled since they started), so the
    launcher's summary says what they did, not the "0 trial(s)" this process ran itself."""
    trials = study.get_trials(deepcopy=False)
    status = trial_status.statuses(trials)
    for trial in trials:
        if trial.number not in before and trial.state.is_finished():
            outcome.ran += 1
            outcome.states[status[trial.number]] += 1
