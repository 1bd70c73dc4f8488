"""Optuna studies over the experiments, on Optuna's ask/tell interface: one invocation of
`harness study`, here, as a launcher of workers, or as one worker (harness/invocation.py).
`--status` reads the study's storage alone (study_status), without this engine's imports.

Its parts, one job each: the study's storage and opening (study_storage), its MLflow parent run
(study_parent), the loop over trials (trial_loop), the requeueing of trials cut off (requeue), the
report (study_report).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import experiments
from experiments import make_config
from harness.errors import UserError
from harness.invocation import Invocation, Log, Stopped
from harness.launchers import Launcher, WorkerRole
from harness.specs.study_spec import StudySpec
from harness.store import Outcome, Store
from harness.store.uris import is_sqlite
from harness.studies import seeded, trial_target, warm_starts
from harness.studies.study_parent import check_same_store, finished_tags, open_parent
from harness.studies.study_storage import open_study, storage_faults
from harness.studies.trial_loop import StopReason, StudyOutcome, TrialLoop


def run_study(spec: StudySpec, store: Store, db_url: str, *, scale: str, overrides: dict[str, Any],
              n_trials: int | None = None, timeout: float | None = None, workers: int = 1,
              launcher: Launcher | None = None, role: WorkerRole | None = None, show_progress: bool = True,
              out_dir: Path | None = None, log: Log = print, budget_s: float | None = None) -> StudyOutcome:
    """Run (or resume) a study until it has `n_trials` finished trials, in this process or in
    `workers` worker processes (harness/invocation.py); then report it. With `role`, this process is
    one of a launcher's workers: it runs trials under the launcher's parent run and reports nothing.
    With `budget_s` (or a budget its storage keeps) no trial starts once the time left is what the
    race needs (studies/search_budget.py)."""
    if spec.baseline is not None and (workers > 1 or role is not None):
        raise UserError(f"study {spec.name} times its trials against a baseline trial; run it with one worker "
                        "(parallel trials would share the cores they are timed on, and wait for the baseline).")
    run = Invocation("study", "trials", store, db_url, workers, launcher, role, log)
    overrides = run.worker_overrides(overrides, lambda given: None if "threads" in given else
                                     make_config(spec.fixed_for_checks(scale, given)).threads)
    loop = _trial_loop(spec, run, scale, overrides, n_trials, timeout, show_progress)
    loop.search_budget = _search_budget(spec, loop.study, scale, budget_s, log)
    check_same_store(loop.study, store, loop.experiment_id, db_url)
    warm_starts.queue(spec, loop.study, scale, run.log)   # before any worker starts, in a study without a baseline
    if role is not None:
        return run.as_worker(lambda claims: loop.work(claims, role.parent_run_id), finished_tags,
                             faults=lambda: storage_faults(db_url))
    outcome = _as_parent(run, loop, overrides, out_dir)
    outcome.budgeted = loop.search_budget is not None
    return outcome


def finish_budget(spec: StudySpec, db_url: str, *, scale: str, overrides: dict[str, Any], log: Log = print) -> None:
    """After the race of a budgeted study: its phase is done, and what it spent is said."""
    from harness.studies.budget import DONE, Budget

    kept = Budget.open(open_study(spec, spec.study_name(scale, overrides), db_url, create=False), None, log)
    if kept is not None:
        kept.enter(DONE)
        log(kept.line())


def _trial_loop(spec: StudySpec, run: Invocation, scale: str, overrides: dict[str, Any], n_trials: int | None,
                timeout: float | None, show_progress: bool) -> TrialLoop:
    """The study opened (created if new) with the settings its trials share; a bad fixed value stops
    the study here, before it is created."""
    fixed = trial_target.applied(spec, scale, spec.fixed(scale, overrides))
    experiments.get(spec.experiment).check_model(getattr(make_config(fixed), "model", None),
                                                 where=f"study {spec.name}")
    name, target = spec.study_name(scale, overrides), n_trials or spec.trials_at(scale)
    role, db_url = run.role, run.db_url
    study = open_study(spec, name, db_url, create=True,
                       seed_salt=role.index if role else (0 if is_sqlite(db_url) else os.getpid()))
    trial_target.check_study(study, fixed)
    seeded.check_study(study, spec.seeds_at(scale))
    return TrialLoop(spec, study, run.store, run.open_experiment(spec.name), scale, fixed, target, timeout,
                     show_progress, run.log)


def _search_budget(spec: StudySpec, study, scale: str, seconds: float | None, log: Log):
    """The study's budget with what its race needs, or None for a study without one."""
    from harness.studies.budget import Budget
    from harness.studies.search_budget import SearchBudget

    kept = Budget.open(study, seconds, log)
    if kept is None:
        return None
    found = trial_target.read(spec, scale)
    tuned = dict(spec.baseline.params) if spec.baseline is not None else {}
    if found is not None and "lr_factor" in tuned:
        tuned["lr_factor"] = float(found["lr_factor"])
    calibrated = found.get("reference_time_to_target_s") if found else None
    return SearchBudget(spec, study, kept, calibrated, tuned)


def _as_parent(run: Invocation, loop: TrialLoop, overrides: dict[str, Any], out_dir: Path | None) -> StudyOutcome:
    """The invocation that owns the parent run: its trials (here, or by the launcher's workers), then
    the study's report, written and logged."""
    store = run.store
    parent, what = open_parent(run, loop, overrides)
    with run.as_parent(parent, Stopped) as claims:  # a stopped study says what Stopped() says by default
        if not run.launches:
            with storage_faults(run.db_url):
                outcome = loop.work(claims, parent)
            store.check_still_there()  # the last trial went into the store the study opened
        elif (outcome := loop.launch(run, claims, parent, overrides)).stop == StopReason.DETACHED:
            return outcome
        report, paths = loop.report(outcome, parent, out_dir)
        store.end_run(parent, Outcome.OK, tags=finished_tags(outcome))
        store.describe_run(parent, what + "\n\n" + report.text.splitlines()[0] + ".")
    run.log(report.text)
    run.log("written: " + ", ".join(str(p) for p in paths))
    return outcome
