"""A study's warm starts (`[[warm_start]]`, specs/warm_start.py) resolved at its scale and queued,
once, with Optuna's `enqueue_trial`, so its first trials after the baseline are the known stacks
and the sampler starts from recipes that can win.

They are queued when the baseline has completed (at once in a study without one): a baseline that
failed is queued again, and Optuna runs waiting trials oldest first, so warm starts queued with it
would run before the baseline that sets their target. A study attribute records that they were
queued, so a resumed study never queues them again; a study that ran sampled trials before its file
had warm starts does not get them. They count toward the study's trials like any other; those the
target leaves waiting run first when the study is resumed with a larger one.

At the study's scale: `lr_factor = "tuned"` becomes the tuned factor (a factor the [space] does not
offer is refused: the space is the study's identity, and it is the file's to widen); a warm start
whose dtype left the space on this host (studies/host_space.py), or whose values are those of the
baseline or of an earlier warm start, is left out with one line saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.errors import UserError
from harness.specs.study_spec import StudySpec
from harness.specs.warm_start import TUNABLE, TUNED
from harness.studies import baseline, host_space, trial_target
from harness.studies.trial_tags import WARM_START_ATTR

QUEUED_ATTR = "harness.warm_starts"   # study user attribute: {"queued": [names], "left_out": [lines]}


@dataclass
class Plan:
    starts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)   # name, params as Optuna stores them
    left_out: list[str] = field(default_factory=list)                          # one line each


def plan(spec: StudySpec, scale: str) -> Plan:
    """The warm starts to queue at `scale`, in the file's order."""
    planned = Plan()
    book = dict(spec.baseline.params) if spec.baseline is not None else {}
    seen = {_key(spec, book): f"the baseline ({spec.baseline.name})"} if book else {}
    for start in spec.warm_start:
        values = {**book, **start.params}
        if values.get(TUNABLE) == TUNED:
            values[TUNABLE] = tuned_factor(spec, scale, start.name)
        dtype = _emulated_dtype(spec, values)
        if dtype is not None:
            planned.left_out.append(f"warm start '{start.name}' left out: this CPU emulates {dtype}; "
                                    "--keep-emulated keeps it")
            continue
        key = _key(spec, values)
        if key in seen:
            planned.left_out.append(f"warm start '{start.name}' left out: at scale {scale} it sets the values of "
                                    f"{seen[key]}")
            continue
        seen[key] = f"warm start '{start.name}'"
        planned.starts.append((start.name, {k: spec.space[k].optuna_value(v) for k, v in values.items()}))
    return planned


def tuned_factor(spec: StudySpec, scale: str, name: str) -> float:
    """The tuned baseline's lr factor at `scale`: the calibration's times the baseline's own, or the
    baseline's own at a scale without a calibration; one the [space] does not offer is refused."""
    own = float(spec.baseline.params.get(TUNABLE, 1.0))
    calibrated = trial_target.tuned_factor(spec, scale)
    factor = own * calibrated if calibrated is not None else own
    param = spec.space[TUNABLE]
    if not param.admits(factor):
        offered = ", ".join(map(str, param.choices)) if param.choices else f"{param.low:g} to {param.high:g}"
        raise UserError(f"study file {spec.shown}: [[warm_start]] '{name}' trains at the tuned {TUNABLE} {factor:g} "
                        f"(results/targets/{spec.name}-{scale}.json), which [space] {TUNABLE} does not offer "
                        f"({offered}); add it to [space].")
    return factor


def queue(spec: StudySpec, study, scale: str, log) -> None:
    """Queue the warm starts, once: after the baseline completed, or at once without a baseline."""
    if not spec.warm_start or QUEUED_ATTR in study.user_attrs:
        return
    if spec.baseline is not None and baseline.finished(study) is None:
        return
    trials = study.get_trials(deepcopy=False)
    if any(not t.user_attrs.get(baseline.BASELINE_ATTR) and WARM_START_ATTR not in t.user_attrs for t in trials):
        line = "warm starts not queued: the study ran sampled trials before its file had them"
        study.set_user_attr(QUEUED_ATTR, {"queued": [], "left_out": [line]})
        log(line)
        return
    planned = plan(spec, scale)
    named = {t.user_attrs.get(WARM_START_ATTR) for t in trials}   # queued before a kill cut this short
    for name, params in planned.starts:
        if name not in named:
            study.enqueue_trial(params, user_attrs={WARM_START_ATTR: name}, skip_if_exists=False)
    study.set_user_attr(QUEUED_ATTR, {"queued": [name for name, _ in planned.starts], "left_out": planned.left_out})
    for line in planned.left_out:
        log(line)
    if planned.starts:
        log(f"queued {len(planned.starts)} warm start(s): " + ", ".join(name for name, _ in planned.starts))


def label(trial) -> str:
    """What a trial's progress line adds when it is a warm start."""
    name = trial.user_attrs.get(WARM_START_ATTR)
    return f" (warm start: {name})" if name else ""


def report_lines(study) -> list[str]:
    """The report's lines on warm starts left out."""
    return list((study.user_attrs.get(QUEUED_ATTR) or {}).get("left_out", []))


def _emulated_dtype(spec: StudySpec, values: dict[str, Any]) -> str | None:
    """The dtype, left out of the space on this host, that one of the values trains in (or None);
    any other value the space does not admit is a mistake the file's check should have caught."""
    host = host_space.host_of(spec)
    for name, value in values.items():
        param = spec.space[name]
        if param.admits(value):
            continue
        dtype = param.fields(value).get(host_space.DTYPE) if param.type == "categorical" else None
        if host is not None and dtype in host.left_out:
            return dtype
        raise UserError(f"study file {spec.shown}: a warm start sets {name} = {value!r}, which [space] does not "
                        f"allow for {name}.")
    return None


def _key(spec: StudySpec, values: dict[str, Any]) -> str:
    return json.dumps({k: spec.space[k].optuna_value(v) for k, v in sorted(values.items())}, sort_keys=True,
                      default=str)
