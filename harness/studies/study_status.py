"""`harness study NAME --status`: what a study holds, read from its storage alone. It runs nothing,
so it opens neither the MLflow store nor the engine (torch, MLflow's client): a look at a study
costs Optuna's storage and the report's table, not a trial's start-up."""

from __future__ import annotations

import logging
import warnings

from harness.errors import UserError, first_line
from harness.specs.study_spec import StudySpec
from harness.store.shared_db import check_url, engine_kwargs, patient_sqlite
from harness.store.uris import hide_password, is_sqlite, redact


def status(spec: StudySpec, db_url: str, *, scale: str, overrides: dict) -> str:
    """The study's report text, its trials of dead processes told apart from running ones."""
    from harness.studies import study_report
    from harness.studies.liveness import running_trials, status_text

    study = _load(spec, spec.study_name(scale, overrides), db_url)
    return status_text(study_report.build(spec, study), running_trials(study, db_url))


def not_run(spec: StudySpec, study_name: str, url: str) -> UserError:
    """The sentence for a study that is not in the storage."""
    return UserError(f"study '{study_name}' has not been run in {redact(url)}; run "
                     f"`harness study {spec.name.removeprefix('study_')} --scale {study_name.split('-')[1]}` first.")


def _load(spec: StudySpec, study_name: str, url: str):
    import optuna
    import sqlalchemy
    from optuna.storages import RDBStorage

    check_url(url)
    if not _exists(url):
        raise not_run(spec, study_name, url)
    if is_sqlite(url):
        patient_sqlite()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("optuna").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # Read as it is: making Optuna's tables and checking their schema version (alembic) is the
    # engine's work when it opens the study to run it, and took most of a second here.
    storage = RDBStorage(url, engine_kwargs=engine_kwargs(url), skip_table_creation=True,
                         skip_compatibility_check=True)
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:   # Optuna's word for a study name the storage does not hold
        raise not_run(spec, study_name, url) from None
    except Exception as err:
        if "studies" not in sqlalchemy.inspect(storage.engine).get_table_names():   # only sweeps used it
            raise not_run(spec, study_name, url) from None
        raise UserError(f"cannot read the study storage {redact(url)}: {hide_password(first_line(err), url)}") from None


def _exists(url: str) -> bool:
    """A SQLite storage file is there (a server's database always is): --status creates none."""
    from pathlib import Path

    return not is_sqlite(url) or Path(url.removeprefix("sqlite:///")).is_file()
