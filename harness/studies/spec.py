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
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness import specfile
from harness.config import check_keys, make_config
from harness.errors import UserError
from harness.specfile import SCALES, SWEEPS_DIR, SpecFile

PREFIX = "study_"
Direction = Literal["maximize", "minimize"]
SAMPLERS = ("tpe", "random", "nsga2", "qmc")
PRUNERS = ("none", "median", "percentile", "successive_halving", "hyperband", "threshold")

# Which way is better for the metrics the harness knows; a study asking the other way is a mistake.
METRIC_SENSE = {
    "test_accuracy": "maximize", "epoch_test_accuracy": "maximize", "samples_per_s": "maximize",
    "train_time_s": "minimize", "epoch_time_median_s": "minimize", "epoch_time_iqr_s": "minimize",
    "param_count": "minimize", "peak_rss_mb": "minimize", "train_loss": "minimize",
}
HARNESS_METRICS = ("peak_rss_mb", "threads_used")  # added to every cell by the cell runner


class Param(BaseModel):
    """One searched config field: `{ type = "float", low = 1e-4, high = 1e-1, log = true }`,
    `{ type = "int", low = 1, high = 8 }` or `{ choices = [16, 32, 64] }`."""
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    type: Literal["float", "int", "categorical"] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "Param":
        self.type = self.type or ("categorical" if self.choices is not None else None)
        if self.type is None:
            raise ValueError("needs a type (float, int or categorical) or a list of choices")
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("needs a non-empty list of choices")
            return self
        if self.low is None or self.high is None:
            raise ValueError("needs low and high")
        if self.type == "int" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError("is an int range; low and high must be integers")
        if not self.low < self.high:
            raise ValueError(f"is empty or inverted: low {self.low:g} is not below high {self.high:g}")
        if self.log and self.low <= 0:
            raise ValueError(f"is log-scaled, so low must be above 0 (got {self.low:g})")
        return self

    def suggest(self, trial) -> Any:
        if self.type == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log,
                                     step=int(self.step or 1))
        return trial.suggest_categorical(self.name, self.choices)

    def extremes(self) -> list:
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return [int(self.low), int(self.high)]
        return [self.low, self.high]


class StudySpec(SpecFile):
    kind: ClassVar[str] = "study"
    metric: str | None = None
    metrics: list[str] = []
    direction: Direction | None = None
    directions: list[Direction] = []
    space: dict[str, Param] = Field(min_length=1)
    n_trials: int | dict[str, int] = 20
    sampler: dict[str, Any] = {}
    pruner: dict[str, Any] = {}

    @model_validator(mode="after")
    def _normalize(self) -> "StudySpec":
        if self.metric is not None:
            self.metrics = [self.metric, *self.metrics]
        if self.direction is not None:
            self.directions = [self.direction, *self.directions]
        if not self.metrics:
            raise ValueError("give the objective as metric = \"...\" (or metrics = [...])")
        if len(self.metrics) != len(self.directions):
            raise ValueError(f"{len(self.metrics)} metric(s) {self.metrics} but {len(self.directions)} "
                             f"direction(s) {self.directions}; give one direction per metric")
        for name, param in self.space.items():
            param.name = name
        counts = self.n_trials if isinstance(self.n_trials, dict) else {s: self.n_trials for s in SCALES}
        for scale, count in counts.items():
            if count <= 0:
                raise ValueError(f"n_trials for scale '{scale}' must be a positive integer (got {count})")
        self.n_trials = counts
        return self

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1

    def trials_at(self, scale: str) -> int:
        return self.n_trials.get(scale, self.n_trials.get("full", 20))

    def fixed(self, scale: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The settings every trial shares at a scale; searched parameters are left out."""
        overrides = dict(overrides or {})
        check_keys(overrides)
        self.check_read(overrides)
        for key, value in overrides.items():
            if isinstance(value, list):
                raise UserError(f"--set {key}: a study takes single values; its search space is in {self.path}.")
            if key in self.space:
                raise UserError(f"--set {key}: '{key}' is searched by this study; edit [space] in {self.path} "
                                "to change its range.")
        fixed = super().fixed(scale, overrides)
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


def load(name_or_path: str) -> StudySpec:
    path = specfile.find(name_or_path, folder=SWEEPS_DIR, prefix=PREFIX, kind="study", available=available())
    spec = specfile.read(path, StudySpec)
    spec.title = spec.title or spec.name
    check(spec)
    return spec


def check(spec: StudySpec) -> None:
    """Every mistake a study file can hold that its types do not show, as one sentence, before a
    trial runs."""
    import experiments

    where = spec.path
    if spec.experiment not in experiments.names():
        raise UserError(f"study file {where}: unknown experiment '{spec.experiment}'; choose one of "
                        f"{', '.join(experiments.names())}.")
    experiment = experiments.get(spec.experiment)
    for metric, direction in zip(spec.metrics, spec.directions):
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
    spec.check_read(spec.space)  # an unknown key too, named with the file
    spec.check_fields()
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
                    cfg = make_config({**fixed, param.name: value})
                except UserError as err:
                    raise UserError(f"study file {where}, scale {scale}: {param.name}={value!r} from the "
                                    f"search space is not valid: {err}") from None
                experiment.check_model(cfg.model, where=f"study file {where}, scale {scale}")
