"""Optuna studies over the experiments: each trial is a RunConfig run through the same `run(cfg)` as
a grid cell, logged as an MLflow child run of the study's parent run with the grid's param and
metric names.

Resuming: the study lives in a database (SQLite beside the MLflow store by default) and is loaded
if it exists; the sampler is reseeded past the trials already made, so a rerun continues instead
of replaying the first run's parameters. A trial left RUNNING by a killed process is failed and
queued again with the same parameters (Optuna's RetryHeartbeatStaleTrialCallback): at once when the
process ran on this host and is gone, after the heartbeat grace period when it ran elsewhere.

Exactly N trials: `--n-trials N` is the study's total of finished (complete or pruned) trials. Each
trial first claims one of N slots in the claims table (harness/claims.py), so K workers on one or
many machines finish exactly N between them, and a dead worker's slot is taken over, not lost.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from harness import sharedb
from harness.claims import DONE, Claims
from harness.config import make_config
from harness.errors import CellPruned, UserError
from harness.studyspec import StudySpec
from harness.sweep import preflight, run_cell
from harness.sweepspec import Cell
from harness.tracking import OK, PRUNED, SCALE, Store, _first_line, _process_alive, redact

STUDY, TRIAL, KIND, RETRY_OF = "harness.study", "harness.trial", "harness.kind", "harness.retry_of"
OWNER_ATTR = "harness.owner"          # "host|pid|pid_start|trial number" of the process running it
RUN_ATTR = "mlflow_run_id"
HEARTBEAT_S, GRACE_S, MAX_RETRY = 10, 60, 2
MAX_FAILS_IN_A_ROW = 5


class TrialFailed(Exception):
    """The trial's cell failed or was skipped; Optuna records the trial as FAIL and goes on."""


@dataclass
class WorkerResult:
    ran: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    stopped_because: str = ""


# --- storage and study --------------------------------------------------------------------------
def storage(url: str):
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    sharedb.check_url(url)
    if sharedb.is_sqlite(url):
        sharedb.patient_sqlite()
    _quiet_optuna()
    for attempt in range(4):
        try:
            return RDBStorage(url, engine_kwargs=sharedb.engine_kwargs(url), heartbeat_interval=HEARTBEAT_S,
                              grace_period=GRACE_S,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY))
        except Exception as err:
            # Workers starting together on a new database race to create Optuna's tables; the
            # loser finds them made on the next try.
            if attempt < 3 and not isinstance(err, optuna.exceptions.StorageInternalError):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise UserError(f"cannot open the study storage {redact(url)}: "
                            f"{sharedb.hide_password(_first_line(getattr(err, '__cause__', None) or err), url)}") from None


def _quiet_optuna() -> None:
    import warnings

    import optuna

    # ERROR: Optuna would log each failed trial with a traceback; the worker prints one line instead.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("optuna").setLevel(logging.ERROR)


def sampler(spec: StudySpec, seed: int):
    import optuna

    name = spec.sampler.get("name", "tpe")
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=spec.sampler.get("population_size", 8))
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed, scramble=True)
    # constant_liar: a running trial counts as a poor result, so parallel workers spread out.
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True,
                                      n_startup_trials=spec.sampler.get("n_startup_trials", 5))


def pruner(spec: StudySpec):
    import optuna

    p = spec.pruner
    name = p.get("name", "none")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.get("n_startup_trials", 3),
                                           n_warmup_steps=p.get("n_warmup_steps", 1))
    if name == "percentile":
        return optuna.pruners.PercentilePruner(p.get("percentile", 25.0), n_startup_trials=p.get("n_startup_trials", 3),
                                               n_warmup_steps=p.get("n_warmup_steps", 1))
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner()
    if name == "threshold":
        return optuna.pruners.ThresholdPruner(lower=p.get("lower"), upper=p.get("upper"),
                                              n_warmup_steps=p.get("n_warmup_steps", 0))
    return optuna.pruners.NopPruner()


def open_study(spec: StudySpec, study_name: str, url: str, *, create: bool, seed_salt: int = 0):
    """Load (or create) the study; the sampler's seed moves past the trials already made."""
    import optuna

    store = storage(url)
    exists = study_name in {s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False)}
    if not exists and not create:
        raise UserError(f"study '{study_name}' has not been run in {redact(url)}; run "
                        f"`harness study {spec.name.removeprefix('study_')} --scale {study_name.split('-')[-1]}` first.")
    directions = spec.directions
    if exists:
        stored = optuna.load_study(study_name=study_name, storage=store)
        had = [d.name.lower() for d in stored.directions]
        if had != directions:
            raise UserError(f"study '{study_name}' in {redact(url)} was created to {had} but {spec.path} now "
                            f"asks to {directions} for {spec.metrics}; give it another name or storage.")
        n_before = len(stored.get_trials(deepcopy=False))
    else:
        n_before = 0
    seed = int(spec.sampler.get("seed", 0)) + n_before + 100_003 * seed_salt
    study = optuna.create_study(study_name=study_name, storage=store, directions=directions, load_if_exists=True,
                                sampler=sampler(spec, seed), pruner=pruner(spec))
    return study


# --- dead trials ----------------------------------------------------------------------------------
def owner_tag(number: int) -> str:
    me = psutil.Process()
    return f"{socket.gethostname()}|{me.pid}|{me.create_time():.2f}|{number}"


def reap_dead_trials(study) -> int:
    """Fail RUNNING trials whose process (on this host) is gone, and queue each again once."""
    import optuna
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    host, reaped = socket.gethostname(), 0
    retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(trial.user_attrs.get(OWNER_ATTR, "")).split("|")
        if len(owner) != 4 or owner[0] != host or owner[3] != str(trial.number):
            continue  # another host (the heartbeat covers it), or not started by the objective yet
        if _process_alive(owner[1], owner[2]):
            continue
        try:
            if not study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker reaped it first
            continue
        retry(study, study._storage.get_trial(trial._trial_id))
        reaped += 1
    return reaped


# --- the MLflow side ------------------------------------------------------------------------------
def parent_run(store: Store, experiment_id: str, study_name: str, scale: str, info: dict[str, Any]) -> str:
    """The study's one parent run: found by tag (the oldest, if two machines raced to create it),
    reopened for this invocation, else created."""
    from mlflow.entities import ViewType

    def existing():
        return store.client.search_runs(
            [experiment_id], f"tags.`{STUDY}` = '{study_name}' and tags.`{KIND}` = 'study'",
            ViewType.ACTIVE_ONLY, order_by=["attributes.start_time ASC"])

    found = existing()
    if not found:
        created = store.start_run(experiment_id, study_name, {STUDY: study_name, SCALE: scale, KIND: "study"})
        store.log_params(created, info)
        found = existing()
        if found[0].info.run_id != created:  # lost a creation race: use the first, drop ours
            store.client.delete_run(created)
        return found[0].info.run_id
    run_id = found[0].info.run_id
    me = psutil.Process()
    store.client.update_run(run_id, status="RUNNING")
    store.set_tags(run_id, {"harness.pid": me.pid, "harness.pid_start": f"{me.create_time():.2f}",
                            "harness.host": socket.gethostname()})
    return run_id


# --- one worker -----------------------------------------------------------------------------------
def work(spec: StudySpec, study, store: Store, claims: Claims, *, scale: str, fixed: dict[str, Any],
         target: int, timeout: float | None, parent_id: str, show_progress: bool = True,
         log=print) -> WorkerResult:
    """Run trials until the study has `target` finished ones (counted by slots), the timeout has
    passed, or several trials in a row failed."""
    import optuna
    from optuna.trial import TrialState

    experiment_id = store.experiment_id(spec.name)
    namespace = f"study:{study.study_name}"
    deadline = time.monotonic() + timeout if timeout else None
    result = WorkerResult()
    fails_in_a_row = 0
    cell_probe = make_config(fixed)
    preflight([Cell(fixed, "preflight", cell_probe)])
    prune_on = spec.pruner.get("metric", "epoch_test_accuracy")
    last: dict[str, Any] = {}

    def objective(trial: optuna.Trial):
        trial.set_user_attr(OWNER_ATTR, owner_tag(trial.number))
        last["number"] = trial.number
        retry_of = study._storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")
        values = {**fixed, **{name: p.suggest(trial) for name, p in spec.space.items()}}
        label = f"trial {trial.number}: " + " ".join(f"{k}={_short(values[k])}" for k in spec.space)
        cell = Cell(values, label)
        try:
            cell.config = make_config(values)
        except UserError as err:
            cell.error = str(err)
        trial.set_user_attr("cell_id", cell.cell_id)
        tags = {STUDY: study.study_name, SCALE: scale, KIND: "trial", TRIAL: str(trial.number)}
        if retry_of is not None:
            tags[RETRY_OF] = str(retry_of)

        def report(epoch: int, metrics: dict[str, float]) -> None:
            if prune_on in metrics and not spec.multi_objective:
                trial.report(metrics[prune_on], epoch)
                if trial.should_prune():
                    raise CellPruned(f"pruned after epoch {epoch}: {prune_on} {metrics[prune_on]:.4g}")

        outcome = run_cell(store, experiment_id, cell, tags=tags, parent_id=parent_id,
                           show_epochs=show_progress, epoch_hook=report)
        last.update(outcome=outcome.outcome, reason=outcome.reason)
        trial.set_user_attr(RUN_ATTR, outcome.run_id)
        if outcome.outcome == PRUNED:
            raise optuna.TrialPruned(outcome.reason)
        if outcome.outcome != OK:
            raise TrialFailed(f"{outcome.outcome}: {outcome.reason}")
        missing = [m for m in spec.metrics if m not in outcome.metrics]
        if missing:
            raise UserError(f"experiment {spec.experiment} returned no metric '{missing[0]}'; it returns "
                            f"{', '.join(sorted(outcome.metrics))}.")
        return [outcome.metrics[m] for m in spec.metrics]

    slots = [f"slot-{i:05d}" for i in range(target)]
    while True:
        if deadline and time.monotonic() > deadline:
            result.stopped_because = "timeout"
            break
        reap_dead_trials(study)
        store.reap_stale_runs(experiment_id)  # the MLflow runs of a worker killed meanwhile
        held = claims.all(namespace)
        if sum(c.state == DONE for c in held.values()) >= target:
            result.stopped_because = "target reached"
            break
        slot = next((s for s in slots if (s not in held or claims.takeable(held[s], retake_done=False))
                     and claims.claim(namespace, s)), None)
        if slot is None:
            result.stopped_because = "every remaining trial is running in another worker"
            break
        last.clear()
        try:
            study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM: the cut-off trial is queued to run again
            if "number" in last:
                _retry(study, last["number"])
            claims.drop(namespace, slot)
            raise
        frozen = study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(
            study._study_id, last["number"])) if "number" in last else None
        state = frozen.state if frozen else TrialState.FAIL
        result.ran += 1
        name = state.name.lower()
        result.outcomes[name] = result.outcomes.get(name, 0) + 1
        if state in (TrialState.COMPLETE, TrialState.PRUNED):
            claims.release(namespace, slot, DONE, note=f"trial {frozen.number}")
            fails_in_a_row = 0
            values = ", ".join(f"{m}={v:.4g}" for m, v in zip(spec.metrics, frozen.values or []))
            log(f"  trial {frozen.number} {name}: {values if name == 'complete' else last.get('reason', '')}")
        else:
            claims.drop(namespace, slot)  # a failed trial does not use up a slot
            fails_in_a_row += 1
            log(f"  trial {last.get('number', '?')} failed: {last.get('reason', '')}")
            if fails_in_a_row >= MAX_FAILS_IN_A_ROW:
                result.stopped_because = f"{fails_in_a_row} trials in a row failed; last: {last.get('reason')}"
                break
    return result


def _retry(study, number: int) -> None:
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    frozen = study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number))
    if frozen.state.name == "FAIL":
        RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, frozen)


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def counts(study) -> dict[str, int]:
    from optuna.trial import TrialState

    states = [t.state for t in study.get_trials(deepcopy=False)]
    return {s.name.lower(): states.count(s) for s in TrialState}


def seed_salt(worker_index: int | None) -> int:
    """Different sampler seeds for workers started together: the launcher's index, else the pid."""
    return worker_index if worker_index is not None else os.getpid()
