"""The calibrated target a study's trials are timed to, read from `results/targets/<study>-<scale>.json`.

The file is written by `harness study NAME --calibrate-target` (studies/deciding/calibrated_target.py,
which says how it is measured). Running the trials needs only what it holds: the target accuracy,
the fine clock, the cap on a trial's seconds and the tuned lr factor. So this reading lives with the
trials, and the calibration beside the race that reads the same file, so that nothing that runs a
trial imports the half that decides.

A scale the study's `[target]` does not list keeps the [baseline]'s own target (target_from_epoch);
a listed scale without its file is refused, in one sentence, before anything runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import folders
from harness.errors import UserError
from harness.specs.study_spec import StudySpec

ATTR = "harness.calibrated_target"   # study user attribute: the target its trials were timed to


def path(spec: StudySpec, scale: str) -> Path:
    return folders.TARGETS_DIR / f"{spec.name}-{scale}.json"


def calibrated_at(spec: StudySpec, scale: str) -> bool:
    return spec.target is not None and scale in spec.target.epochs


def read(spec: StudySpec, scale: str) -> dict[str, Any] | None:
    """The calibration of a listed scale; None for a scale the [target] does not list."""
    if not calibrated_at(spec, scale):
        return None
    where = path(spec, scale)
    if not where.exists():
        name = spec.name.removeprefix("study_")
        raise UserError(f"study {spec.name} at scale {scale} is timed to a calibrated target and {where} does not "
                        f"exist; run `harness study {name} --calibrate-target --scale {scale}` (make study-"
                        f"{name.replace('_', '-')}-calibrate SCALE={scale}) first.")
    return json.loads(where.read_text())


def applied(spec: StudySpec, scale: str, fixed: dict[str, Any]) -> dict[str, Any]:
    """The fixed settings with the calibrated target and fine clock (unchanged at other scales)."""
    found = read(spec, scale)
    if found is None:
        return fixed
    applied = {**fixed, "target_from_epoch": 0, "target_accuracy": found["target_accuracy"],
               "check_every_samples": found["check_every_samples"], "probe_size": found["probe_size"]}
    if spec.target.give_up_after and found.get("reference_time_to_target_s"):
        # the tuned factor's median seconds on the calibration's machine: on one up to `give_up_after`
        # times slower, a trial is still cut only once it is slower than the tuned baseline there,
        # which no winner is
        applied["give_up_after_s"] = round(spec.target.give_up_after * found["reference_time_to_target_s"], 1)
    return applied


def tuned_factor(spec: StudySpec, scale: str) -> float | None:
    """The tuned baseline's lr factor (over the study's lr) the calibration found, if it ran: the fastest to
    the target over its seeds (in a file from before the lr was timed, the best-accuracy factor)."""
    found = read(spec, scale)
    return None if found is None else float(found["lr_factor"])


def check_study(study, fixed: dict[str, Any]) -> None:
    """A study's trials are timed to one target: a calibration redone after trials ran is refused."""
    if not fixed.get("target_accuracy") or not fixed.get("check_every_samples"):
        return
    now = {k: fixed[k] for k in ("target_accuracy", "check_every_samples", "probe_size")}
    if fixed.get("give_up_after_s"):   # a study from before the cap existed compares without it
        now["give_up_after_s"] = fixed["give_up_after_s"]
    had = study.user_attrs.get(ATTR)
    if had is None:
        study.set_user_attr(ATTR, now)
    elif had != now:
        raise UserError(f"study '{study.study_name}' was timed to {had} and its target file now says {now}; "
                        "give the recalibrated study another --storage, or restore the file.")
