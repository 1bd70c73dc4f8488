"""Study definitions: `sweeps/study_<name>.toml`, read and checked; nothing runs here.

A study names the experiment, its search space (floats, log-scaled or not, ints, categoricals),
the objective metric(s) and direction(s), the sampler and its seed, an optional pruner, the number
of trials per scale and the fixed settings (base, then the scale's overrides) - like a sweep file,
with [space] in place of [grid]. Every sampled point becomes a plain RunConfig and goes through the
same experiment `run(cfg)` as a grid cell; experiment code never sees Optuna.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import experiments
from harness.config import make_config
from harness.errors import UserError
from harness.sweepspec import SCALES, SWEEPS_DIR

PREFIX = "study_"
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random", "nsga2", "qmc")
PRUNERS = ("none", "median", "percentile", "successive_halving", "hyperband", "threshold")

# Which way is better for the metrics the harness knows; a study asking the other way is a mistake.
METRIC_SENSE = {
    "test_accuracy": "maximize", "epoch_test_accuracy": "maximize", "samples_per_s": "maximize",
    "train_time_s": "minimize", "epoch_time_median_s": "minimize", "epoch_time_iqr_s": "minimize",
    "param_count": "minimize", "peak_rss_mb": "minimize", "train_loss": "minimize",
}
HARNESS_METRICS = ("peak_rss_mb", "threads_used")  # added to every cell by the sweep engine


@dataclass
class Param:
    name: str
    kind: str                        # float | int | categorical
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: list | None = None

    def suggest(self, trial) -> Any:
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, log=self.log, step=self.step or 1)
        return trial.suggest_categorical(self.name, self.choices)

    def extremes(self) -> list:
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]


@dataclass
class StudySpec:
    name: str
    title: str
    experiment: str
    metrics: list[str]
    directions: list[str]
    space: dict[str, Param]
    base: dict[str, Any]
    scales: dict[str, dict[str, Any]]
    n_trials: dict[str, int]
    sampler: dict[str, Any] = field(default_factory=dict)
    pruner: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    path: Path | None = None

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1

    def fixed(self, scale: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The settings every trial shares at a scale; searched parameters are left out."""
        if scale not in self.scales:
            raise UserError(f"unknown scale '{scale}'; choose one of {', '.join(self.scales)}.")
        overrides = dict(overrides or {})
        experiments.check_reads(self.experiment, overrides)
        for key, value in overrides.items():
            if isinstance(value, list):
                raise UserError(f"--set {key}: a study takes single values; its search space is in {self.path}.")
            if key in self.space:
                raise UserError(f"--set {key}: '{key}' is searched by this study; edit [space] in {self.path} "
                                "to change its range.")
        fixed = {"experiment": self.experiment, **self.base, **self.scales[scale], **overrides}
        for key in self.space:
            fixed.pop(key, None)
        return fixed

    def study_name(self, scale: str, overrides: dict[str, Any] | None = None) -> str:
        """The Optuna study's name. Other fixed settings (--set) make another study, not a mixed one."""
        name = f"{self.name}-{scale}"
        if overrides:
            digest = hashlib.sha1(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()
            name += f"-{digest[:8]}"
        return name


def available() -> list[str]:
    return sorted(p.stem.removeprefix(PREFIX) for p in SWEEPS_DIR.glob(f"{PREFIX}*.toml"))


def find(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        return path
    for candidate in (SWEEPS_DIR / f"{PREFIX}{name_or_path}.toml", SWEEPS_DIR / f"{name_or_path}.toml"):
        if candidate.is_file() and candidate.stem.startswith(PREFIX):
            return candidate
    raise UserError(f"unknown study '{name_or_path}'; choose one of {', '.join(available())} "
                    "or give the path of a study .toml file.")


def load(name_or_path: str) -> StudySpec:
    path = find(name_or_path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"study file {path} is not valid TOML: {err}.") from None
    try:
        metrics = _as_list(raw["metric"] if "metric" in raw else raw["metrics"])
        directions = _as_list(raw["direction"] if "direction" in raw else raw["directions"])
        spec = StudySpec(
            name=raw["name"], title=raw.get("title", raw["name"]), experiment=raw["experiment"],
            metrics=metrics, directions=directions,
            space={k: _param(k, v, path) for k, v in raw["space"].items()},
            base=raw.get("base", {}),
            scales={s: raw.get("scales", {}).get(s, {}) for s in SCALES} | raw.get("scales", {}),
            n_trials=_n_trials(raw.get("n_trials", 20), path),
            sampler=raw.get("sampler", {}), pruner=raw.get("pruner", {}), source=raw.get("source", ""),
            path=path,
        )
    except KeyError as err:
        raise UserError(f"study file {path} lacks the required key {err}.") from None
    check(spec)
    return spec


def _as_list(value) -> list:
    return list(value) if isinstance(value, list) else [value]


def _n_trials(value, path: Path) -> dict[str, int]:
    counts = {s: value for s in SCALES} if isinstance(value, int) else dict(value)
    for scale, count in counts.items():
        if not isinstance(count, int) or count <= 0:
            raise UserError(f"n_trials for scale '{scale}' in {path} must be a positive integer (got {count!r}).")
    return counts


def _param(name: str, raw: dict, path: Path) -> Param:
    if not isinstance(raw, dict):
        raise UserError(f"search space entry '{name}' in {path} must be a table like "
                        "{ type = \"float\", low = 1e-4, high = 1e-1, log = true }.")
    kind = raw.get("type") or ("categorical" if "choices" in raw else None)
    if kind not in ("float", "int", "categorical"):
        raise UserError(f"search space entry '{name}' in {path} has type {kind!r}; use float, int or categorical.")
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UserError(f"search space entry '{name}' in {path} needs a non-empty list of choices.")
        return Param(name, kind, choices=choices)
    if "low" not in raw or "high" not in raw:
        raise UserError(f"search space entry '{name}' in {path} needs low and high.")
    low, high = raw["low"], raw["high"]
    if kind == "int" and not (isinstance(low, int) and isinstance(high, int)):
        raise UserError(f"search space entry '{name}' in {path} is an int range; low and high must be integers.")
    if not low < high:
        raise UserError(f"search range for '{name}' in {path} is empty or inverted: low {low} is not below high {high}.")
    log = bool(raw.get("log", False))
    if log and low <= 0:
        raise UserError(f"search range for '{name}' in {path} is log-scaled, so low must be above 0 (got {low}).")
    return Param(name, kind, low=low, high=high, log=log, step=raw.get("step"))


def check(spec: StudySpec) -> None:
    """Every mistake a study file can hold, as one sentence, before a trial runs."""
    where = spec.path
    if spec.experiment not in experiments.REGISTRY:
        raise UserError(f"study file {where}: unknown experiment '{spec.experiment}'; choose one of "
                        f"{', '.join(experiments.REGISTRY)}.")
    if not spec.metrics or len(spec.metrics) != len(spec.directions):
        raise UserError(f"study file {where} has {len(spec.metrics)} metric(s) {spec.metrics} but "
                        f"{len(spec.directions)} direction(s) {spec.directions}; give one direction per metric.")
    experiment = experiments.get(spec.experiment)
    for metric, direction in zip(spec.metrics, spec.directions):
        if direction not in DIRECTIONS:
            raise UserError(f"study file {where}: direction '{direction}' for {metric} should be maximize or minimize.")
        if not (experiment.has_metric(metric) or metric in HARNESS_METRICS):
            reported = dict.fromkeys((*experiment.metrics, *HARNESS_METRICS))  # in order, once each
            raise UserError(f"study file {where}: unknown metric '{metric}'; experiment {spec.experiment} "
                            f"reports {', '.join(reported)}.")
        sense = METRIC_SENSE.get(metric)
        if sense and sense != direction:
            raise UserError(f"study file {where} asks to {direction} {metric}, which is better when "
                            f"{'higher' if sense == 'maximize' else 'lower'}; the direction should be {sense}.")
    if len(set(spec.metrics)) != len(spec.metrics):
        raise UserError(f"study file {where} names a metric twice in {spec.metrics}.")
    # Unknown keys, and keys the experiment never reads (they would change nothing but the trial's id).
    keys = [*spec.space, *spec.base, *(k for s in spec.scales.values() for k in s)]
    experiments.check_reads(spec.experiment, keys, where=f"study file {where}")
    sampler = spec.sampler.get("name", "tpe")
    if sampler not in SAMPLERS:
        raise UserError(f"study file {where}: unknown sampler '{sampler}'; choose one of {', '.join(SAMPLERS)}.")
    pruner = spec.pruner.get("name", "none")
    if pruner not in PRUNERS:
        raise UserError(f"study file {where}: unknown pruner '{pruner}'; choose one of {', '.join(PRUNERS)}.")
    if pruner != "none" and spec.multi_objective:
        raise UserError(f"study file {where} has a pruner and {len(spec.metrics)} objectives; Optuna prunes "
                        "single-objective studies only, so remove [pruner] or keep one metric.")
    if pruner != "none":
        reported = spec.pruner.get("metric", "epoch_test_accuracy")
        sense = METRIC_SENSE.get(reported)
        if sense and sense != spec.directions[0]:
            raise UserError(f"study file {where}: the pruner reads {reported}, which is better when "
                            f"{'higher' if sense == 'maximize' else 'lower'}, but the study should "
                            f"{spec.directions[0]} {spec.metrics[0]}; prune on a metric going the same way.")
    for scale in spec.scales:
        fixed = spec.fixed(scale)
        if pruner != "none" and spec.pruner.get("metric", "epoch_test_accuracy") == "epoch_test_accuracy" \
                and not make_config(fixed).eval_every_epoch:
            raise UserError(f"study file {where}: the pruner reads epoch_test_accuracy, which experiments "
                            "report only with eval_every_epoch = true; add it to [base].")
        for param in spec.space.values():  # each end of each range must make a valid config
            for value in param.extremes():
                try:
                    make_config({**fixed, param.name: value})
                except UserError as err:
                    raise UserError(f"study file {where}, scale {scale}: {param.name}={value!r} from the "
                                    f"search space is not valid: {err}") from None
