"""A study's home in the shared database: Optuna's RDB storage opened (patiently, for workers that
start together), the study loaded or created with its sampler reseeded past the trials already
made, and the file that made it checked against the one opening it. A refusal of the storage reads
as one sentence.

Resuming: the study lives in a database (SQLite beside the MLflow store by default) and is loaded
if it exists; the sampler is reseeded past the trials already made, so a rerun continues instead
of replaying the first run's parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import warnings

from harness.errors import StoreFault, UserError, first_line
from harness.specs.study_spec import StudySpec
from harness.store import redact
from harness.store.shared_db import check_url, engine_kwargs, patient_sqlite
from harness.store.uris import hide_password, is_sqlite
from harness.studies import host_space, study_status, trial_status
from harness.studies.trial_status import TrialStatus

SPACE_ATTR = "harness.space"        # the study's own attribute: a digest of the [space] that created it


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
            raise UserError(f"study '{study_name}' in {redact(url)} was created to {had} but {spec.shown} now "
                            f"asks to {spec.directions} for {spec.metrics}; give it another name or storage.")
        n_before = len(stored.get_trials(deepcopy=False))
    seed = spec.sampler.seed + n_before + 100_003 * seed_salt
    study = optuna.create_study(study_name=study_name, storage=store, directions=spec.directions,
                                load_if_exists=True, sampler=spec.sampler.to_optuna(seed),
                                pruner=spec.pruner.to_optuna())
    # first: a host of another class (or another --keep-emulated) fits another space than the one recorded
    host_space.check_study(study, spec, study_name, url,
                           space_changed=study.user_attrs.get(SPACE_ATTR) not in (None, space_digest(spec)))
    _check_space(study, spec, study_name, url)
    host_space.record(study, spec)
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
                        f"{spec.shown}; give this file another name, or pass another --storage.")


def counts(study) -> dict[TrialStatus, int]:
    return trial_status.count(study.get_trials(deepcopy=False))


@contextlib.contextmanager
def storage_faults(url: str):
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
