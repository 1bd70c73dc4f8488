"""A study's one MLflow parent run: found by its tag (whichever invocation or machine made it first),
reopened for each invocation, described, and named in the study for optuna-dashboard; and the check
that a study's database is used with the MLflow store that holds its runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness import ui_links
from harness.errors import UserError
from harness.invocation import Invocation
from harness.specs.study_spec import StudySpec
from harness.store import Store, redact
from harness.store.tracking import KIND, SCALE
from harness.studies.study_storage import counts, storage_faults
from harness.studies.trial_status import TrialStatus
from harness.studies.trial_tags import STUDY

if TYPE_CHECKING:
    from harness.studies.trial_loop import StudyOutcome, TrialLoop


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
    from optuna.trial import TrialState

    if all(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)):
        return   # a new study (or one whose queued trials never started) is this store's from its first trial on
    if store.runs(experiment_id, tags={STUDY: study.study_name}):
        return
    raise UserError(f"study '{study.study_name}' in {redact(url)} has trials whose runs another tracking store "
                    f"holds, not {redact(store.uri)}; pass this store its own --storage, or the --tracking-uri the "
                    "study was run with.")


def open_parent(run: Invocation, loop: TrialLoop, overrides: dict[str, Any]) -> tuple[str, str]:
    """The study's parent run, reopened (or created) for this invocation and described, and named in
    the study for optuna-dashboard; returns it and its description."""
    spec, name, store = loop.spec, loop.study.study_name, loop.store
    parent = parent_run(store, loop.experiment_id, name, loop.scale, {
        "study": name, "study_file": spec.path, "scale": loop.scale, "metrics": spec.metrics,
        "directions": spec.directions, "sampler": spec.sampler.as_logged(),
        "pruner": spec.pruner.as_logged(), "overrides": overrides, "storage": redact(run.db_url)})
    what = _what_ran(run, spec, name, loop.scale, loop.target, overrides)
    store.describe_run(parent, what)
    with storage_faults(run.db_url):
        _label_study(spec, loop.study, store, loop.experiment_id, parent)
    done = counts(loop.study)
    already = done[TrialStatus.COMPLETE] + done[TrialStatus.PRUNED]
    loop.log(f"study {name}: target {loop.target} finished trials, {already} already; "
             f"storage {redact(run.db_url)}; MLflow parent run {parent}")
    return parent, what


def finished_tags(outcome: StudyOutcome) -> dict[str, int]:
    """The parent run's tag when it is closed: how many trials the study has finished."""
    return {"harness.trials_finished": outcome.finished}


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
