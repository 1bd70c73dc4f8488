"""One invocation's trials: ask Optuna for a trial, run it as a cell, tell Optuna how it ended, until
the study has its target of finished trials, the timeout has passed, or several trials in a row
failed. Each trial is a cell (a RunConfig run through the same `run(cfg)` as a grid cell), logged as
an MLflow child run of the study's parent run with the grid's param and metric names.

Exactly N trials: the target is the study's total of finished (complete or pruned) trials. Each
trial first claims one of N slots in the claims table, so K workers on one or many machines finish
exactly N between them. A dead worker's slot is taken over: the claim's holder is dead when it ran
on this host and its process is gone, or its heartbeat stopped (another host); whoever takes the
slot over requeues the dead worker's trial (harness/studies/requeue.py).

The loop is one object, `TrialLoop`, whose steps are methods (claim a slot, ask, run, tell), so a
study that runs a trial's parameters more than once, or stops a trial early against its rivals,
changes one step and keeps the others.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from experiments import make_config
from harness.cells import CellResult, preflight, run_cell
from harness.errors import CellPruned
from harness.invocation import Invocation, Log
from harness.specs.cell_spec import Cell
from harness.specs.study_spec import NOT_REACHED, StudySpec
from harness.store import Claims, Outcome, Store
from harness.store.claims import Claim, ClaimState
from harness.store.tracking import KIND, SCALE
from harness.studies import baseline, budget, host_space, incumbent, isolation, requeue, seeded, warm_starts
from harness.studies.liveness import OWNER_ATTR, SLOT_ATTR
from harness.studies import trial_status
from harness.studies.trial_status import INTERRUPTED_ATTR, RETRY_OF, TrialStatus
from harness.studies.trial_tags import CONTENDED, LOAD_METRICS, METRICS_ATTR, OTHER_CORES, RUN_ATTR, STUDY, TRIAL

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


def objective(metric: str, direction: str, metrics: dict[str, float]) -> float | None:
    """The value Optuna is told for one objective: the metric; for a target a complete run did not
    reach (time_to_accuracy_s absent, target_reached 0), the worst value there is; else None."""
    if metric in metrics:
        return metrics[metric]
    flag = NOT_REACHED.get(metric)
    if flag is not None and metrics.get(flag) == 0:
        return float("inf") if direction == "minimize" else float("-inf")
    return None


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
    _began: float = field(default=0.0, init=False)

    @property
    def namespace(self) -> str:
        """The claims namespace of the study's slots."""
        return f"study:{self.study.study_name}"

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
        outcome.finished = self.finished_slots(claims)
        return outcome

    def _loop(self, claims: Claims, parent: str, outcome: StudyOutcome, execute, deadline: float | None) -> StopReason:
        """Trials until a reason to stop, which it returns."""
        fails_in_a_row = 0
        slots = [f"slot-{i:05d}" for i in range(self.target)]
        while True:
            if deadline and time.monotonic() > deadline:
                return StopReason.TIMEOUT
            held = claims.all(self.namespace)
            if sum(c.state == ClaimState.DONE for c in held.values()) >= self.target:
                return StopReason.TARGET_REACHED
            slot, grant = self._claim_slot(claims, slots, held)
            if slot is None:
                if self._siblings_running(claims, held):  # wait: if one of them dies, its slot is taken over here
                    time.sleep(WAIT_POLL_S)
                    continue
                return StopReason.OTHERS_RUNNING
            if grant.previous is not None and self._took_over(claims, slot, grant.previous):
                continue
            if self.search_budget is not None and (why := self.search_budget.stop_search()):
                claims.drop(self.namespace, slot)
                self.log(f"  no more trials: {why}")
                return StopReason.BUDGET
            baseline.queue(self.spec, self.study)  # a study with a baseline runs it first (again, if it failed)
            warm_starts.queue(self.spec, self.study, self.scale, self.log)   # then its warm starts, once
            self.store.check_still_there()  # no trial is run into, or counted by, a deleted store
            state, reason = self.one_trial(claims, slot, parent, execute)
            if self.search_budget is not None:
                self.search_budget.spend(time.monotonic() - self._began)
            outcome.count(state, reason)
            fails_in_a_row = fails_in_a_row + 1 if state == TrialStatus.FAIL else 0
            if fails_in_a_row >= MAX_FAILS_IN_A_ROW:
                return StopReason.TOO_MANY_FAILURES

    def finished_slots(self, claims: Claims) -> int:
        """The study's finished trials, counted by their slots."""
        return sum(c.state == ClaimState.DONE for c in claims.all(self.namespace).values())

    @staticmethod
    def _siblings_running(claims: Claims, held: dict[str, Claim]) -> bool:
        """Whether another live worker of this invocation is running a trial."""
        return any(c.state == ClaimState.RUNNING and c.token == claims.token and c.owner != claims.owner
                   and claims.holder_alive(c) for c in held.values())

    def _claim_slot(self, claims: Claims, slots: list[str], held: dict[str, Claim]):
        for slot in slots:
            if slot in held and not claims.takeable(held[slot], retake_done=False):
                continue
            grant = claims.claim(self.namespace, slot)
            if grant is not None:
                return slot, grant
        return None, None

    def _took_over(self, claims: Claims, slot: str, dead: Claim) -> bool:
        """The slot's holder died: close and requeue what it left behind. True when its trial had
        finished already (the slot is then released as done, and no new trial runs in it)."""
        for line in requeue.requeue_trials_of(self.study, self.store, self.experiment_id, dead):
            self.log(line)
        if requeue.told_before_release(self.study, slot):
            claims.release(self.namespace, slot, ClaimState.DONE, note="finished by a worker that died before releasing it")
            return True
        return False

    # --- one trial: ask, run, tell ----------------------------------------------------------------
    def one_trial(self, claims: Claims, slot: str, parent: str, execute=None) -> tuple[TrialStatus, str | None]:
        """Ask for a trial, run it as a cell, tell Optuna how it ended; returns its state and reason."""
        self._began = time.monotonic()
        trial = self.study.ask()
        try:
            cell = self.ask(trial, claims, slot)
            hook = self.pruning_hook(trial)   # a trial of several seeds is pruned on its first seed's epochs
            result, spread = seeded.run_seeds(
                self.spec, self.spec.seeds_at(self.scale), cell,
                lambda seed_cell, first: run_cell(self.store, self.experiment_id, seed_cell, tags=self.tags(trial),
                                                  parent_id=parent, show_epochs=self.show_progress,
                                                  epoch_hook=hook if first else None, execute=execute), objective)
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
                claims.drop(self.namespace, slot)
            raise
        return self.tell(trial, result, claims, slot)

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
        if not trial.user_attrs.get(baseline.BASELINE_ATTR):   # the baseline's time is the reference: never cut
            values = self._limited(trial, values)
        label = f"trial {trial.number}: " + " ".join(
            spec.space[k].optuna_value(v) if spec.space[k].compound else f"{k}={_short(v)}" for k, v in sampled.items())
        if trial.user_attrs.get(baseline.BASELINE_ATTR):
            label += f" ({spec.baseline.name})"
        label += warm_starts.label(trial)
        cell = Cell.build(values, label)
        trial.set_user_attr("cell_id", cell.cell_id)
        return cell

    def _limited(self, trial, values: dict[str, Any]) -> dict[str, Any]:
        """The trial's values with the training seconds it may spend before it cannot win."""
        found = incumbent.limit(self.spec, self.study, values)
        if found is None:
            return values
        seconds, why = found
        seconds = round(seconds, 3)   # not to 0.1 s: a tiny model's whole time to the target can be less
        trial.set_user_attr(incumbent.LIMIT_ATTR, {"limit_s": seconds, "why": why})
        return {**values, "give_up_after_s": seconds}

    def tags(self, trial) -> dict[str, str]:
        """The MLflow tags of the trial's run (and a line when it retries an interrupted trial)."""
        tags = {STUDY: self.study.study_name, SCALE: self.scale, KIND: "trial", TRIAL: str(trial.number)}
        if RETRY_OF in trial.user_attrs:
            tags[RETRY_OF] = str(trial.user_attrs[RETRY_OF])
            self.log(f"  trial {trial.number} runs again the parameters of trial {tags[RETRY_OF]}, which was interrupted")
        return tags

    def pruning_hook(self, trial) -> Callable[[int, dict[str, float]], None]:
        """What runs after each epoch of the trial: report to the pruner, and stop when it says so."""
        prune_on, multi_objective = self.spec.pruner.metric, self.spec.multi_objective

        def report(epoch: int, metrics: dict[str, float]) -> None:
            if prune_on in metrics and not multi_objective:
                trial.report(metrics[prune_on], epoch)
                if trial.should_prune():
                    raise CellPruned(f"pruned after epoch {epoch + 1}: {prune_on} {metrics[prune_on]:.4g}")
        return report

    def tell(self, trial, result: CellResult, claims: Claims, slot: str) -> tuple[TrialStatus, str | None]:
        """Optuna told how the trial's cell ended, and its slot released (done) or dropped (failed)."""
        from optuna.trial import TrialState

        spec = self.spec
        values = [objective(m, d, result.metrics) for m, d in zip(spec.metrics, spec.directions)]
        missing = [m for m, v in zip(spec.metrics, values) if v is None]
        if result.outcome == Outcome.OK and missing:
            result.outcome, result.reason = Outcome.FAILED, (
                f"experiment {spec.experiment} returned no metric '{missing[0]}'; it returns {', '.join(sorted(result.metrics))}")
        if result.outcome == Outcome.OK:
            trial.set_user_attr(budget.WALL_ATTR, round(time.monotonic() - self._began, 2))
            if "train_time_s" in result.metrics:
                trial.set_user_attr(budget.CLOCK_ATTR, result.metrics["train_time_s"])
        if result.outcome == Outcome.OK and not trial.user_attrs.get(baseline.BASELINE_ATTR) \
                and incumbent.not_reached(spec, result.metrics):
            result.outcome, result.reason = Outcome.PRUNED, self._pruned(trial, result.metrics)
        if result.outcome == Outcome.OK:
            trial.set_user_attr(METRICS_ATTR, {m: result.metrics[m] for m in (*spec.report_metrics, *LOAD_METRICS)
                                               if m in result.metrics})
            self.study.tell(trial, values)
            baseline.record(self.study, trial, result.metrics)
            claims.release(self.namespace, slot, ClaimState.DONE, note=f"trial {trial.number}")
            shown = ", ".join(f"{m}={v:.4g}" if abs(v) != float("inf") else f"{m}: not reached"
                              for m, v in zip(spec.metrics, values))
            if result.metrics.get(CONTENDED) == 1:
                shown += (f" (contended: other work held {result.metrics.get(OTHER_CORES, 0):.1f} cores while it "
                          "ran, so its time is likely slow)")
            self.log(f"  trial {trial.number} complete: {shown}")
            return TrialStatus.COMPLETE, None
        if result.outcome == Outcome.PRUNED:
            self.study.tell(trial, state=TrialState.PRUNED)
            claims.release(self.namespace, slot, ClaimState.DONE, note=f"trial {trial.number}")
            self.log(f"  trial {trial.number} pruned: {result.reason}")
            return TrialStatus.PRUNED, result.reason
        self.study.tell(trial, state=TrialState.FAIL)
        claims.drop(self.namespace, slot)  # a failed trial does not use up a slot
        reason = f"{result.outcome}: {result.reason}"
        self.log(f"  trial {trial.number} failed: {reason}")
        return TrialStatus.FAIL, reason

    def _pruned(self, trial, metrics: dict[str, float]) -> str:
        """A trial that did not reach the target: its best accuracy, clock and why it stopped, kept on it."""
        given = trial.user_attrs.get(incumbent.LIMIT_ATTR) or {}
        reason = incumbent.pruned_reason(metrics, given.get("limit_s"), given.get("why"))
        trial.set_user_attr(incumbent.PRUNED_ATTR, {"reason": reason, "best_test_accuracy": metrics.get("best_test_accuracy"),
                                                     "train_time_s": metrics.get("train_time_s"),
                                                     "limit_s": given.get("limit_s")})
        trial.set_user_attr(METRICS_ATTR, {m: metrics[m] for m in (*self.spec.report_metrics, *LOAD_METRICS)
                                           if m in metrics})
        return reason

    # --- the trials of a launcher's workers, and the report ---------------------------------------
    def launch(self, run: Invocation, claims: Claims, parent: str, overrides: dict[str, Any]) -> StudyOutcome:
        """The trials run by the launcher's workers, read back from the study once they are done; the
        outcome's stop is DETACHED when the launcher left them running."""
        name, target, timeout = self.study.study_name, self.target, self.timeout
        codes: list[int] | None = []
        before = {t.number for t in self.study.get_trials(deepcopy=False)}
        if self.finished_slots(claims) < target:  # else there is nothing for workers to do
            args = [str(self.spec.path), "--scale", self.scale, "--n-trials", str(target),
                    *(["--timeout", str(timeout)] if timeout else []), *host_space.worker_args(self.spec)]
            progress = (lambda: (self.finished_slots(claims), target)) if self.show_progress else None
            codes = run.launch(f"study {name}", args, overrides, threads=make_config(self.fixed).threads or 1,
                               parent=parent, token=claims.token, progress=progress)
        if codes is None:
            return StudyOutcome(name, target, StopReason.DETACHED, parent_run_id=parent)
        stop = StopReason.WORKERS_FAILED if any(codes) else StopReason.TIMEOUT if timeout else StopReason.TARGET_REACHED
        outcome = StudyOutcome(name, target, stop)
        self._count_workers_trials(outcome, before)
        return outcome

    def _count_workers_trials(self, outcome: StudyOutcome, before: set[int]) -> None:
        """The trials this invocation's workers ran (every trial settled since they started), so the
        launcher's summary says what they did, not the "0 trial(s)" this process ran itself."""
        trials = self.study.get_trials(deepcopy=False)
        status = trial_status.statuses(trials)
        for trial in trials:
            if trial.number not in before and trial.state.is_finished():
                outcome.ran += 1
                outcome.states[status[trial.number]] += 1

    def report(self, outcome: StudyOutcome, parent: str, out_dir: Path | None) -> tuple[StudyReport, list[Path]]:
        """The study's report (best trials, Pareto front), written beside the parent run; the
        outcome's count of finished trials is the study's from then on."""
        from harness.studies import study_report

        report = study_report.build(self.spec, self.study)
        outcome.finished = report.counts[TrialStatus.COMPLETE] + report.counts[TrialStatus.PRUNED]
        outcome.parent_run_id = parent
        return report, study_report.write(self.spec, report, self.store, parent, out_dir)


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
