"""Optuna studies over the experiments, on Optuna's ask/tell interface: this engine owns the loop.
Each trial is a cell (a RunConfig run through the same `run(cfg)` as a grid cell), logged as an
MLflow child run of the study's parent run with the grid's param and metric names.

Exactly N trials: `--n-trials N` is the study's total of finished (complete or pruned) trials. Each
trial first claims one of N slots in the claims table, so K workers on one or many machines finish
exactly N between them.

Resuming: the study lives in a database (SQLite beside the MLflow store by default) and is loaded
if it exists; the sampler is reseeded past the trials already made, so a rerun continues instead
of replaying the first run's parameters. A dead worker's slot is taken over: the claim's holder is
dead when it ran on this host and its process is gone, or its heartbeat stopped (another host).
Whoever takes the slot over fails the dead worker's trial and queues its parameters again (at most
MAX_RETRY times), so a trial cut off by a crash or a Ctrl-C is retried, not lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import experiments
from experiments import make_config
from harness import ui_links
from harness.cells import preflight, run_cell
from harness.specs.cell_spec import Cell
from harness.errors import CellPruned, StoreFault, UserError, first_line
from harness.invocation import Invocation, Stopped
from harness.launchers import Launcher, WorkerRole
from harness.store import Claims, Outcome, Store, redact
from harness.store.claims import DONE, RUNNING, Claim
from harness.store.shared_db import check_url, engine_kwargs, patient_sqlite
from harness.store.tracking import KIND, SCALE
from harness.store.uris import hide_password, is_sqlite
from harness.studies import baseline, isolation
from harness.studies.liveness import OWNER_ATTR, SLOT_ATTR
from harness.specs.study_spec import NOT_REACHED, StudySpec
from harness.studies import study_status, trial_status
from harness.studies.trial_status import INTERRUPTED_ATTR, RETRY_OF, TrialStatus

if TYPE_CHECKING:
    from harness.studies.study_report import StudyReport

STUDY, TRIAL = "harness.study", "harness.trial"
RETRIES_ATTR = "harness.retries"    # how many times these parameters were queued again
RUN_ATTR = "mlflow_run_id"
METRICS_ATTR = "harness.metrics"    # the [report] metrics of a complete trial, for the study's report
SPACE_ATTR = "harness.space"        # the study's own attribute: a digest of the [space] that created it
MAX_RETRY = 2
MAX_FAILS_IN_A_ROW = 5
WAIT_POLL_S = 0.5  # how often a worker with no slot left looks at the trials its siblings run (a read)
Log = Callable[[str], None]


class StopReason(Enum):
    TARGET_REACHED = "target reached"
    TIMEOUT = "timeout"
    OTHERS_RUNNING = "every remaining trial is running in another worker"
    TOO_MANY_FAILURES = f"{MAX_FAILS_IN_A_ROW} trials in a row failed"
    WORKERS_FAILED = "a worker exited with an error"
    DETACHED = "the workers run on as detached jobs"

    @property
    def exit_code(self) -> int:
        return 0 if self in (StopReason.TARGET_REACHED, StopReason.TIMEOUT, StopReason.OTHERS_RUNNING,
                             StopReason.DETACHED) else 1


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

    @property
    def exit_code(self) -> int:
        """0 when the study has what was asked (or the timeout said stop), 1 when it fell short."""
        if self.stop.exit_code:
            return self.stop.exit_code
        return 1 if self.stop not in (StopReason.TIMEOUT, StopReason.DETACHED) and self.finished < self.target else 0

    def line(self) -> str:
        ran = ", ".join(f"{n} {s}" for s, n in self.states.items()) or "none"
        failure = f"; last failure: {self.last_failure}" if self.last_failure else ""
        return f"ran {self.ran} trial(s) ({ran}); stopped: {self.stop.value}{failure}"


# --- storage and study --------------------------------------------------------------------------
def storage(url: str):
    """Optuna's RDB storage on the shared database, or one sentence saying why not."""
    import optuna
    from optuna.storages import RDBStorage

    check_url(url)
    if is_sqlite(url):
        patient_sqlite()
    _quiet_optuna()
    for attempt in range(4):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs(url))
        except Exception as err:
            # Workers starting together on a new database race to create Optuna's tables; the
            # loser finds them made on the next try.
            if attempt < 3 and not isinstance(err, optuna.exceptions.StorageInternalError):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise UserError(f"cannot open the study storage {redact(url)}: {_said(err, url)}") from None


def _quiet_optuna() -> None:
    import optuna

    # ERROR: Optuna would log each failed trial with a traceback; the worker prints one line instead.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("optuna").setLevel(logging.ERROR)


def open_study(spec: StudySpec, study_name: str, url: str, *, create: bool, seed_salt: int = 0):
    """Load (or create) the study; the sampler's seed moves past the trials already made."""
    import optuna

    store = storage(url)
    exists = study_name in {s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False)}
    if not exists and not create:
        raise study_status.not_run(spec, study_name, url)
    n_before = 0
    if exists:
        stored = optuna.load_study(study_name=study_name, storage=store)
        had = [d.name.lower() for d in stored.directions]
        if had != spec.directions:
            raise UserError(f"study '{study_name}' in {redact(url)} was created to {had} but {spec.path} now "
                            f"asks to {spec.directions} for {spec.metrics}; give it another name or storage.")
        n_before = len(stored.get_trials(deepcopy=False))
    seed = spec.sampler.seed + n_before + 100_003 * seed_salt
    study = optuna.create_study(study_name=study_name, storage=store, directions=spec.directions,
                                load_if_exists=True, sampler=spec.sampler.to_optuna(seed),
                                pruner=spec.pruner.to_optuna())
    _check_space(study, spec, study_name, url)
    return study


def space_digest(spec: StudySpec) -> str:
    """What a study's trials were sampled from: its [space], every parameter's range and choices."""
    space = {name: param.model_dump() for name, param in sorted(spec.space.items())}
    return hashlib.sha256(json.dumps(space, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _check_space(study, spec: StudySpec, study_name: str, url: str) -> None:
    """A study is the file that made it: another file with the same name and another [space]
    would mix its trials into this one's (and "resume" them). A study made before the space was
    recorded adopts the space of the first file that opens it."""
    digest, had = space_digest(spec), study.user_attrs.get(SPACE_ATTR)
    if had is None:
        study.set_user_attr(SPACE_ATTR, digest)
    elif had != digest:
        raise UserError(f"study '{study_name}' in {redact(url)} was created by a file with another [space] than "
                        f"{spec.path}; give this file another name, or pass another --storage.")


def counts(study) -> dict[TrialStatus, int]:
    return trial_status.count(study.get_trials(deepcopy=False))


# --- the MLflow side ------------------------------------------------------------------------------
def parent_run(store: Store, experiment_id: str, study_name: str, scale: str, info: dict[str, Any]) -> str:
    """The study's one parent run: found by tag (the oldest, if two machines raced to create it),
    reopened for this invocation, else created."""
    tags = {STUDY: study_name, KIND: "study"}
    found = store.runs(experiment_id, tags=tags, oldest_first=True)
    if not found:
        created = store.start_run(experiment_id, study_name, {**tags, SCALE: scale})
        store.log_params(created, info)
        found = store.runs(experiment_id, tags=tags, oldest_first=True)
        if found[0].run_id != created:  # lost a creation race: use the first, drop ours
            store.delete_run(created)
        return found[0].run_id
    store.reopen_run(found[0].run_id)
    return found[0].run_id


def check_same_store(study, store: Store, experiment_id: str, url: str) -> None:
    """A study belongs to the MLflow store that holds its runs. One study database shared by two
    stores (one --storage given to both, or two tracking servers over the project's default
    mlruns/optuna.db) would otherwise let the second "resume" trials whose runs the first holds."""
    if not study.get_trials(deepcopy=False):
        return   # a new study is this store's from its first trial on
    if store.runs(experiment_id, tags={STUDY: study.study_name}):
        return
    raise UserError(f"study '{study.study_name}' in {redact(url)} has trials whose runs another tracking store "
                    f"holds, not {redact(store.uri)}; pass this store its own --storage, or the --tracking-uri the "
                    "study was run with.")


# --- one invocation -------------------------------------------------------------------------------
def run_study(spec: StudySpec, store: Store, db_url: str, *, scale: str, overrides: dict[str, Any],
              n_trials: int | None = None, timeout: float | None = None, workers: int = 1,
              launcher: Launcher | None = None, role: WorkerRole | None = None, show_progress: bool = True,
              out_dir: Path | None = None, log: Log = print) -> StudyOutcome:
    """Run (or resume) a study until it has `n_trials` finished trials, in this process or in
    `workers` worker processes (harness/invocation.py); then report it. With `role`, this process is
    one of a launcher's workers: it runs trials under the launcher's parent run and reports nothing."""
    if spec.baseline is not None and (workers > 1 or role is not None):
        raise UserError(f"study {spec.name} times its trials against a baseline trial; run it with one worker "
                        "(parallel trials would share the cores they are timed on, and wait for the baseline).")
    run = Invocation("study", "trials", store, db_url, workers, launcher, role, log)
    overrides = run.worker_overrides(overrides, lambda given: None if "threads" in given else
                                     make_config(spec.fixed(scale, given)).threads)
    fixed = spec.fixed(scale, overrides)
    # a bad fixed value stops the study here, before it is created
    experiments.get(spec.experiment).check_model(getattr(make_config(fixed), "model", None),
                                                 where=f"study {spec.name}")
    name, target = spec.study_name(scale, overrides), n_trials or spec.trials_at(scale)
    study = open_study(spec, name, db_url, create=True,
                       seed_salt=role.index if role else (0 if is_sqlite(db_url) else _pid()))
    trials = _Trials(spec, study, store, run.open_experiment(spec.name), scale, fixed, target, timeout,
                     show_progress, log)
    check_same_store(study, store, trials.experiment_id, db_url)
    if role is not None:
        return run.as_worker(lambda claims: trials.work(claims, role.parent_run_id), _finished_tags,
                             faults=lambda: _storage_faults(db_url))
    parent, what = trials.open_parent(run, overrides)
    with run.as_parent(parent, Stopped) as claims:  # a stopped study says what Stopped() says by default
        if not run.launches:
            with _storage_faults(db_url):
                outcome = trials.work(claims, parent)
            store.check_still_there()  # the last trial went into the store the study opened
        elif (outcome := trials.launch(run, claims, parent, overrides)).stop == StopReason.DETACHED:
            return outcome
        report, paths = trials.report(outcome, parent, out_dir)
        store.end_run(parent, Outcome.OK, tags=_finished_tags(outcome))
        store.describe_run(parent, what + "\n\n" + report.text.splitlines()[0] + ".")
    log(report.text)
    log("written: " + ", ".join(str(p) for p in paths))
    return outcome


def _finished_tags(outcome: StudyOutcome) -> dict[str, int]:
    """The parent run's tag when it is closed: how many trials the study has finished."""
    return {"harness.trials_finished": outcome.finished}


@dataclass
class _Trials:
    """One invocation's study and the settings its trials share: what the loop over them works with."""
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

    def work(self, claims: Claims, parent: str) -> StudyOutcome:
        """Trials in this process (the one process, or one worker), under `parent`."""
        return _work(self.spec, self.study, self.store, self.experiment_id, claims, scale=self.scale, fixed=self.fixed,
                     target=self.target, timeout=self.timeout, parent=parent, show_progress=self.show_progress,
                     log=self.log)

    def open_parent(self, run: Invocation, overrides: dict[str, Any]) -> tuple[str, str]:
        """The study's parent run, reopened (or created) for this invocation and described, and
        named in the study for optuna-dashboard; returns it and its description."""
        spec, name, store = self.spec, self.study.study_name, self.store
        parent = parent_run(store, self.experiment_id, name, self.scale, {
            "study": name, "study_file": spec.path, "scale": self.scale, "metrics": spec.metrics,
            "directions": spec.directions, "sampler": spec.sampler.as_logged(),
            "pruner": spec.pruner.as_logged(), "overrides": overrides, "storage": redact(run.db_url)})
        what = _what_ran(run, spec, name, self.scale, self.target, overrides)
        store.describe_run(parent, what)
        with _storage_faults(run.db_url):
            _label_study(spec, self.study, store, self.experiment_id, parent)
        done = counts(self.study)
        already = done[TrialStatus.COMPLETE] + done[TrialStatus.PRUNED]
        self.log(f"study {name}: target {self.target} finished trials, {already} already; "
                 f"storage {redact(run.db_url)}; MLflow parent run {parent}")
        return parent, what

    def launch(self, run: Invocation, claims: Claims, parent: str, overrides: dict[str, Any]) -> StudyOutcome:
        """The trials run by the launcher's workers, read back from the study once they are done; the
        outcome's stop is DETACHED when the launcher left them running."""
        name, target, timeout = self.study.study_name, self.target, self.timeout
        namespace, codes = f"study:{name}", []
        before = {t.number for t in self.study.get_trials(deepcopy=False)}
        if _finished_slots(claims, namespace) < target:  # else there is nothing for workers to do
            args = [str(self.spec.path), "--scale", self.scale, "--n-trials", str(target),
                    *(["--timeout", str(timeout)] if timeout else [])]
            progress = (lambda: (_finished_slots(claims, namespace), target)) if self.show_progress else None
            codes = run.launch(f"study {name}", args, overrides, threads=make_config(self.fixed).threads or 1,
                               parent=parent, token=claims.token, progress=progress)
        if codes is None:
            return StudyOutcome(name, target, StopReason.DETACHED, parent_run_id=parent)
        stop = StopReason.WORKERS_FAILED if any(codes) else StopReason.TIMEOUT if timeout else StopReason.TARGET_REACHED
        outcome = StudyOutcome(name, target, stop)
        _count_workers_trials(outcome, self.study, before)
        return outcome

    def report(self, outcome: StudyOutcome, parent: str, out_dir: Path | None) -> tuple[StudyReport, list[Path]]:
        """The study's report (best trials, Pareto front), written beside the parent run; the
        outcome's count of finished trials is the study's from then on."""
        from harness.studies import study_report

        report = study_report.build(self.spec, self.study)
        outcome.finished = report.counts[TrialStatus.COMPLETE] + report.counts[TrialStatus.PRUNED]
        outcome.parent_run_id = parent
        return report, study_report.write(self.spec, report, self.store, parent, out_dir)


def _count_workers_trials(outcome: StudyOutcome, study, before: set[int]) -> None:
    """The trials this invocation's workers ran (every trial settled since they started), so the
    launcher's summary says what they did, not the "0 trial(s)" this process ran itself."""
    trials = study.get_trials(deepcopy=False)
    status = trial_status.statuses(trials)
    for trial in trials:
        if trial.number not in before and trial.state.is_finished():
            outcome.ran += 1
            outcome.states[status[trial.number]] += 1


def _label_study(spec: StudySpec, study, store: Store, experiment_id: str, parent: str) -> None:
    """What optuna-dashboard shows of the study: its objectives by name (not "Objective 0") and
    where its trials are in MLflow."""
    study.set_metric_names(list(spec.metrics))
    study.set_user_attr("mlflow_experiment_id", experiment_id)
    study.set_user_attr("mlflow_parent_run_id", parent)
    study.set_user_attr("mlflow_tracking_uri", redact(store.uri))
    study.set_user_attr("mlflow_runs_table", ui_links.runs_table(experiment_id))


def _what_ran(run: Invocation, spec: StudySpec, name: str, scale: str, target: int, overrides: dict[str, Any]) -> str:
    """The parent run's description: which study, at which scale, how far, on which machine."""
    goal = ", ".join(f"{d} `{m}`" for m, d in zip(spec.metrics, spec.directions))
    return run.describe(spec, name, scale, f"{goal} over {', '.join(f'`{p}`' for p in spec.space)}; target {target} "
                        f"finished trials; sampler {spec.sampler.name}, pruner {spec.pruner.name}", overrides,
                        tail=f" this invocation; storage {redact(run.db_url)}")


# --- one worker's loop ----------------------------------------------------------------------------
def _work(spec: StudySpec, study, store: Store, experiment_id: str, claims: Claims, *, scale: str,
          fixed: dict[str, Any], target: int, timeout: float | None, parent: str, show_progress: bool,
          log: Log) -> StudyOutcome:
    """Ask, run and tell trials until the study has `target` finished ones (counted by slots), the
    timeout has passed, or several trials in a row failed."""
    namespace = f"study:{study.study_name}"
    deadline = time.monotonic() + timeout if timeout else None
    outcome = StudyOutcome(study.study_name, target, StopReason.TARGET_REACHED)
    trials = isolation.runner(spec.trial_isolation)   # a fork server starts importing now, if isolated
    try:
        preflight([make_config(fixed)])
        _loop(spec, study, store, experiment_id, claims, namespace, outcome, trials, scale=scale, fixed=fixed,
              target=target, deadline=deadline, parent=parent, show_progress=show_progress, log=log)
    finally:
        trials.close()
    outcome.finished = sum(c.state == DONE for c in claims.all(namespace).values())
    return outcome


def _loop(spec: StudySpec, study, store: Store, experiment_id: str, claims: Claims, namespace: str,
          outcome: StudyOutcome, trials, *, scale: str, fixed: dict[str, Any], target: int,
          deadline: float | None, parent: str, show_progress: bool, log: Log) -> None:
    fails_in_a_row = 0
    slots = [f"slot-{i:05d}" for i in range(target)]
    while True:
        if deadline and time.monotonic() > deadline:
            outcome.stop = StopReason.TIMEOUT
            break
        held = claims.all(namespace)
        if sum(c.state == DONE for c in held.values()) >= target:
            outcome.stop = StopReason.TARGET_REACHED
            break
        slot, grant = _claim_slot(claims, namespace, slots, held)
        if slot is None:
            if _siblings_running(claims, held):  # wait: if one of them dies, its slot is taken over here
                time.sleep(WAIT_POLL_S)
                continue
            outcome.stop = StopReason.OTHERS_RUNNING
            break
        if grant.previous is not None:  # its holder died: close and requeue what it left behind
            for line in _requeue_trials_of(study, store, experiment_id, grant.previous):
                log(line)
            if _told_before_release(study, slot):
                claims.release(namespace, slot, DONE, note="finished by a worker that died before releasing it")
                continue
        baseline.queue(spec, study)  # a study with a baseline runs it first (again, if it failed)
        store.check_still_there()  # no trial is run into, or counted by, a deleted store
        state, reason = _one_trial(spec, study, store, experiment_id, claims, namespace, slot, scale=scale,
                                   fixed=fixed, parent=parent, show_progress=show_progress, log=log,
                                   execute=trials.execute)
        outcome.ran += 1
        outcome.states[state] += 1
        if state == TrialStatus.FAIL:
            fails_in_a_row += 1
            outcome.last_failure = reason
            if fails_in_a_row >= MAX_FAILS_IN_A_ROW:
                outcome.stop = StopReason.TOO_MANY_FAILURES
                break
        else:
            fails_in_a_row = 0


def _finished_slots(claims: Claims, namespace: str) -> int:
    """The study's finished trials, counted by their slots."""
    return sum(c.state == DONE for c in claims.all(namespace).values())


def _siblings_running(claims: Claims, held: dict[str, Claim]) -> bool:
    """Whether another live worker of this invocation is running a trial."""
    return any(c.state == RUNNING and c.token == claims.token and c.owner != claims.owner and claims.holder_alive(c)
               for c in held.values())


def _claim_slot(claims: Claims, namespace: str, slots: list[str], held: dict[str, Claim]):
    for slot in slots:
        if slot in held and not claims.takeable(held[slot], retake_done=False):
            continue
        grant = claims.claim(namespace, slot)
        if grant is not None:
            return slot, grant
    return None, None


def _one_trial(spec: StudySpec, study, store: Store, experiment_id: str, claims: Claims, namespace: str,
               slot: str, *, scale: str, fixed: dict[str, Any], parent: str, show_progress: bool,
               log: Log, execute=None) -> tuple[TrialStatus, str | None]:
    """Ask for a trial, run it as a cell, tell Optuna how it ended; returns its state and reason."""
    from optuna.trial import TrialState

    trial = study.ask()
    try:
        trial.set_user_attr(OWNER_ATTR, f"{claims.host}|{claims.pid}|{claims.pid_start:.2f}|{claims.owner}")
        trial.set_user_attr(SLOT_ATTR, slot)
        sampled = {name: p.suggest(trial) for name, p in spec.space.items()}
        values = dict(fixed)
        for name, value in sampled.items():
            values.update(spec.space[name].fields(value))
        values = baseline.trial_values(spec, study, trial, values)
        label = f"trial {trial.number}: " + " ".join(
            spec.space[k].optuna_value(v) if spec.space[k].compound else f"{k}={_short(v)}" for k, v in sampled.items())
        if trial.user_attrs.get(baseline.BASELINE_ATTR):
            label += f" ({spec.baseline.name})"
        cell = Cell.build(values, label)
        trial.set_user_attr("cell_id", cell.cell_id)
        tags = {STUDY: study.study_name, SCALE: scale, KIND: "trial", TRIAL: str(trial.number)}
        if RETRY_OF in trial.user_attrs:
            tags[RETRY_OF] = str(trial.user_attrs[RETRY_OF])
            log(f"  trial {trial.number} runs again the parameters of trial {tags[RETRY_OF]}, which was interrupted")
        prune_on = spec.pruner.metric

        def report(epoch: int, metrics: dict[str, float]) -> None:
            if prune_on in metrics and not spec.multi_objective:
                trial.report(metrics[prune_on], epoch)
                if trial.should_prune():
                    raise CellPruned(f"pruned after epoch {epoch + 1}: {prune_on} {metrics[prune_on]:.4g}")

        result = run_cell(store, experiment_id, cell, tags=tags, parent_id=parent, show_epochs=show_progress,
                          epoch_hook=report, execute=execute)
        trial.set_user_attr(RUN_ATTR, result.run_id)
    except BaseException:  # Ctrl-C, SIGTERM, a store fault: the cut-off trial is queued to run again
        # Best effort: if the storage refuses, whoever takes the slot over next does it instead.
        with contextlib.suppress(Exception):
            trial.set_user_attr(INTERRUPTED_ATTR, True)   # counted as interrupted, never as failed
            again = _fail_and_requeue(study, trial.number, dict(trial.params), trial.user_attrs)
            log(f"  trial {trial.number} interrupted, " + (f"requeued as trial {again}" if again is not None
                                                          else "not requeued (its retries are spent)"))
        with contextlib.suppress(Exception):
            claims.drop(namespace, slot)
        raise
    values = [objective(m, d, result.metrics) for m, d in zip(spec.metrics, spec.directions)]
    missing = [m for m, v in zip(spec.metrics, values) if v is None]
    if result.outcome == Outcome.OK and missing:
        result.outcome, result.reason = Outcome.FAILED, (
            f"experiment {spec.experiment} returned no metric '{missing[0]}'; it returns {', '.join(sorted(result.metrics))}")
    if result.outcome == Outcome.OK:
        trial.set_user_attr(METRICS_ATTR, {m: result.metrics[m] for m in spec.report.get("metrics", [])
                                           if m in result.metrics})
        study.tell(trial, values)
        baseline.record(study, trial, result.metrics)
        claims.release(namespace, slot, DONE, note=f"trial {trial.number}")
        shown = ", ".join(f"{m}={v:.4g}" if abs(v) != float("inf") else f"{m}: not reached"
                          for m, v in zip(spec.metrics, values))
        log(f"  trial {trial.number} complete: {shown}")
        return TrialStatus.COMPLETE, None
    if result.outcome == Outcome.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
        claims.release(namespace, slot, DONE, note=f"trial {trial.number}")
        log(f"  trial {trial.number} pruned: {result.reason}")
        return TrialStatus.PRUNED, result.reason
    study.tell(trial, state=TrialState.FAIL)
    claims.drop(namespace, slot)  # a failed trial does not use up a slot
    reason = f"{result.outcome}: {result.reason}"
    log(f"  trial {trial.number} failed: {reason}")
    return TrialStatus.FAIL, reason


def objective(metric: str, direction: str, metrics: dict[str, float]) -> float | None:
    """The value Optuna is told for one objective: the metric; for a target a complete run did not
    reach (time_to_accuracy_s absent, target_reached 0), the worst value there is; else None."""
    if metric in metrics:
        return metrics[metric]
    flag = NOT_REACHED.get(metric)
    if flag is not None and metrics.get(flag) == 0:
        return float("inf") if direction == "minimize" else float("-inf")
    return None


def _requeue_trials_of(study, store: Store, experiment_id: str, dead: Claim) -> list[str]:
    """The slot we took over belonged to a dead worker: fail the trials it left RUNNING, queue their
    parameters again, and close their MLflow runs (its own process can no longer). Returns one line
    per trial saying what became of it."""
    from optuna.trial import TrialState

    lines = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if str(frozen.user_attrs.get(OWNER_ATTR, "")).split("|")[-1] == dead.owner:
            again = _fail_and_requeue(study, frozen.number, dict(frozen.params), frozen.user_attrs)
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


def _told_before_release(study, slot: str) -> bool:
    """Whether a trial of this slot already finished: its worker told Optuna, then died before it
    could release the slot. Running another would make the study one trial too many."""
    from optuna.trial import TrialState

    return any(t.user_attrs.get(SLOT_ATTR) == slot
               for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def _fail_and_requeue(study, number: int, params: dict[str, Any], user_attrs: dict[str, Any]) -> int | None:
    """Fail the trial and queue its parameters again; returns the queued trial's number (None: not queued)."""
    from optuna.trial import TrialState

    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    retries = int(user_attrs.get(RETRIES_ATTR, 0))
    if params and retries < MAX_RETRY:
        kept = {k: v for k, v in user_attrs.items() if k == baseline.BASELINE_ATTR}  # a cut-off baseline stays one
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


@contextlib.contextmanager
def _storage_faults(url: str):
    """Optuna's storage refusing a write (disk full, read-only file) is a store fault: one sentence."""
    import optuna

    try:
        yield
    except optuna.exceptions.StorageInternalError as err:
        raise StoreFault(f"the study storage {redact(url)} refused a write: {_said(err, url)}") from err


def _said(err: BaseException, url: str) -> str:
    """What the storage said, in one line and without the URL's password: the error Optuna or
    SQLAlchemy wrapped, when there is one."""
    return hide_password(first_line(getattr(err, "__cause__", None) or err), url)


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _pid() -> int:
    import os

    return os.getpid()
