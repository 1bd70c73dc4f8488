"""Study definitions: `sweeps/study_<name>.toml`, read and checked; nothing runs here.

A study names the experiment, its search space (floats, log-scaled or not, ints, categoricals),
the objective metric(s) and direction(s), the sampler and its seed, an optional pruner, the number
of trials per scale and the fixed settings (base, then the scale's overrides) - like a sweep file,
with [space] in place of [grid]. Every sampled point becomes a plain RunConfig and goes through the
same experiment `run(cfg)` as a grid cell; experiment code never sees Optuna.

A choice may set several fields together (`layout = { choices = [{ world_size = 1, threads = 2 },
{ world_size = 2, threads = 1 }] }`: Optuna sees each as a label, "world_size=2 threads=1"). A
`[baseline]` is a fixed trial run first (the book's own loop) whose accuracy after
`target_from_epoch` epochs becomes the target every later trial is timed to (studies/baseline.py);
`[[warm_start]]` tables are known recipes run right after it (specs/warm_start.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from experiments import check_keys, make_config
from harness.specs import specfile
from harness.errors import UserError
from harness.folders import SWEEPS_DIR
from harness.specs.specfile import SCALES, SpecFile
from harness.specs.search import EPOCH_METRIC, TPE, AnyPruner, AnySampler, NoPruner
from harness.specs.warm_start import WarmStart, check as check_warm_starts

PREFIX = "study_"
Direction = Literal["maximize", "minimize"]

# Which way is better, for the metrics the cell runner adds (HARNESS_METRICS); an experiment says it
# for its own (`Experiment.sense`). A study asking the other way is a mistake.
HARNESS_SENSE = {"peak_rss_mb": "minimize"}
# Objectives an experiment leaves out when a run did not get there, with the metric that says so
# (0): such a trial is complete and told the worst value (+inf when minimized), not failed.
NOT_REACHED = {"time_to_accuracy_s": "target_reached", "epochs_to_accuracy": "target_reached"}
HARNESS_METRICS = ("peak_rss_mb", "threads_used", "lr_effective")  # added to cells by the cell runner (lr_effective: where a config has lr)
# Objectives read off a clock (seconds, or rates over seconds): a study of one runs each trial in a
# fresh process by default (studies/isolation.py), so no trial's time depends on the trials before it.
CLOCKED = ("mfu", "achieved_tflops")
RESOLUTION = "time_to_accuracy_resolution_s"


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
            if any(isinstance(c, dict) for c in self.choices) and not self.compound:
                raise ValueError("mixes tables and single values in its choices; make every choice a table")
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

    @property
    def compound(self) -> bool:
        """Each choice is a table of several fields set together."""
        return bool(self.choices) and all(isinstance(c, dict) and c for c in self.choices)

    def suggest(self, trial) -> Any:
        """The sampled value: a number, a choice, or (compound) the chosen table of fields."""
        if self.type == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log,
                                     step=int(self.step or 1))
        if self.compound:
            return self.from_label(trial.suggest_categorical(self.name, [label(c) for c in self.choices]))
        return trial.suggest_categorical(self.name, self.choices)

    def fields(self, value: Any) -> dict[str, Any]:
        """The config fields a sampled value sets."""
        return dict(value) if self.compound else {self.name: value}

    def optuna_value(self, value: Any) -> Any:
        """How Optuna stores `value` (a compound choice as its label)."""
        return label(value) if self.compound else value

    def from_label(self, text: str) -> dict[str, Any]:
        return next(c for c in self.choices if label(c) == text)

    def field_names(self) -> list[str]:
        return sorted({k for c in self.choices for k in c}) if self.compound else [self.name]

    def admits(self, value: Any) -> bool:
        """Whether `value` is one of this parameter's values (a baseline must be)."""
        if self.type == "categorical":
            return value in self.choices
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high

    def extremes(self) -> list:
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return [int(self.low), int(self.high)]
        return [self.low, self.high]


def label(choice: dict[str, Any]) -> str:
    """A compound choice as Optuna stores it: "world_size=2 threads=1"."""
    return " ".join(f"{k}={v}" for k, v in choice.items())


class Baseline(BaseModel):
    """`[baseline]`: a fixed trial, run before any sampled one."""
    model_config = ConfigDict(extra="forbid")

    name: str = "baseline"                     # how the report names it ("the book's loop")
    params: dict[str, Any]                     # a value for every [space] parameter
    # > 0: its accuracy after this epoch is every later trial's target; a table gives it per scale
    # ({ cpu = 3, full = 10 }: the end of the baseline's budget at each scale)
    target_from_epoch: int | dict[str, int] = 0

    @model_validator(mode="after")
    def _epochs(self) -> "Baseline":
        epochs = self.target_from_epoch.values() if isinstance(self.target_from_epoch, dict) else [self.target_from_epoch]
        if any(e < 0 for e in epochs):
            raise ValueError("target_from_epoch must be 0 or more")
        return self

    def target_epoch(self, scale: str) -> int:
        """The epoch whose accuracy is the target at `scale` (0: no target)."""
        if isinstance(self.target_from_epoch, dict):
            return self.target_from_epoch.get(scale, self.target_from_epoch.get("full", 0))
        return self.target_from_epoch


class Verify(BaseModel):
    """`[verify]`: how `harness study NAME --verify` re-times the best trial (studies/deciding/verify.py)."""
    model_config = ConfigDict(extra="forbid")

    seeds: list[int] = Field([0, 1, 2], min_length=1)    # the race's seeds, in the order they are drawn
    candidates: int = Field(3, ge=1)                     # the race: the fastest N of the front (or the best N trials)
    first_seeds: int = Field(2, ge=1)                    # every candidate runs these; then only the leader's rivals
    neighbour_seeds: int = Field(2, ge=0)                # the tuned lr's neighbours run beside it on this many first seeds
    budget: int | None = Field(None, ge=1)               # at most this many candidate runs (None: every seed each)
    lr_factors: list[float] = [2.0, 4.0]                 # the tuned baseline: the study's lr times each (and x1)
    ablation_seeds: int = Field(1, ge=1)                 # the first N seeds, for each ablation variant
    changes: dict[str, str] = {}                         # parameter -> what it changes beyond speed (model, optimizer)
    goal_speedup: float = Field(2.0, gt=0)               # the goal: the winner at least this many times the tuned baseline
    goal_lower: float = Field(1.5, gt=0)                 # and the ratio's 95% interval above this


class TargetSpec(BaseModel):
    """`[target]`: a target calibrated from the [baseline] (studies/deciding/calibrated_target.py)."""
    model_config = ConfigDict(extra="forbid")

    epochs: dict[str, int]                                # per scale: E, the reference's epochs; unlisted: not calibrated
    margin: float = Field(0.01, ge=0, lt=1)               # taken off the reference's best accuracy
    seeds: list[int] = Field([0], min_length=1)           # the reference's seeds; the median best accuracy counts
    resolution: float = Field(0.02, gt=0, le=1)           # a check every this share of the reference's steps to it
    probe_size: int = Field(0, ge=0)                      # test images each fine check reads (0: the whole set)
    lr_doublings: int = Field(3, ge=0)                    # a best lr at the grid's top: doubled at most this often
    give_up_after: float = Field(0, ge=0)                 # runs stop at k times the reference's seconds (0: never)


class StudySpec(SpecFile):
    kind: ClassVar[str] = "study"
    metric: str | None = None
    metrics: list[str] = []
    direction: Direction | None = None
    directions: list[Direction] = []
    space: dict[str, Param] = Field(min_length=1)
    n_trials: int | dict[str, int] = 20
    sampler: AnySampler = TPE()               # [sampler] and [pruner]: specs/search.py
    pruner: AnyPruner = NoPruner()
    baseline: Baseline | None = None
    warm_start: list[WarmStart] = []           # [[warm_start]]: known recipes run first, after the baseline
    verify: Verify = Verify()
    target: TargetSpec | None = None           # [target]: a calibrated target (studies/deciding/calibrated_target.py)
    # each trial runs this many seeds, its value their median (studies/seeded.py); a table gives it per scale
    seeds_per_trial: int | dict[str, int] = 1
    report: dict[str, Any] = {}                # metrics = [...]: more columns beside the objectives
    # "process": each trial in a fresh process forked from a clean server; "none": every trial in the
    # study's process. Unset: "process" when an objective is measured by a clock, else "none".
    isolation: Literal["process", "none"] | None = None
    # a trial of a time-to-accuracy study stops once its training clock passes this many times the
    # fastest time to the target so far (studies/incumbent.py): 1 would stop a trial that is merely as
    # fast, so a tie could never be seen; 1.5 leaves room for a trial's own noise (CV about 10-20% here)
    prune_after: float = Field(1.5, ge=1)
    # the host class the space was fitted to (studies/host_space.py); None: the file's space as written
    _host: Any = PrivateAttr(default=None)

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
        if not isinstance(self.n_trials, dict):
            self.n_trials = {s: self.n_trials for s in SCALES}
        return self

    @field_validator("n_trials", "seeds_per_trial")
    @classmethod
    def _at_least_one(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        # A field rule, not a rule of the whole file: its mistake names the field and its value alone.
        for scale, count in (value.items() if isinstance(value, dict) else [("", value)]):
            if count < 1:
                raise ValueError("must be 1 or more" + (" at every scale" if scale else ""))
        return value

    @property
    def trial_isolation(self) -> str:
        """Where each trial runs: "process" (a fresh one each) or "none" (the study's own)."""
        if self.isolation is not None:
            return self.isolation
        clocked = any(m.endswith("_s") or m in CLOCKED for m in self.metrics)
        return "process" if clocked else "none"

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1

    @property
    def report_metrics(self) -> list[str]:
        """The columns beside the objectives: [report] metrics, and with a time to accuracy its
        resolution (the seconds between the crossing check and the one before), always shown with it."""
        extra = list(self.report.get("metrics", []))
        if "time_to_accuracy_s" in self.metrics and RESOLUTION not in extra:
            extra.insert(0, RESOLUTION)
        return extra

    def seeds_at(self, scale: str) -> int:
        """The seeds each trial runs at `scale` (1 unless the file says more)."""
        if isinstance(self.seeds_per_trial, dict):
            return self.seeds_per_trial.get(scale, 1)
        return self.seeds_per_trial

    def trials_at(self, scale: str) -> int:
        return self.n_trials.get(scale, self.n_trials.get("full", 20))

    def fixed(self, scale: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The settings every trial shares at a scale; searched parameters are left out."""
        overrides = dict(overrides or {})
        check_keys(overrides, read_by=self.experiment)
        self.check_read(overrides)
        searched = self.searched_fields()
        for key, value in overrides.items():
            if isinstance(value, list):
                raise UserError(f"--set {key}: a study takes single values; its search space is in {self.shown}.")
            if key in searched:
                raise UserError(f"--set {key}: '{key}' is searched by this study; edit [space] in {self.shown} "
                                "to change its range.")
            if self.target is not None and scale in self.target.epochs and key in (
                    "target_accuracy", "target_from_epoch", "check_every_samples", "probe_size"):
                raise UserError(f"--set {key}: this study's target at scale {scale} is calibrated ([target] in "
                                f"{self.shown}); recalibrate it with --calibrate-target instead.")
            if self.targets_from_baseline and key in ("target_accuracy", "target_from_epoch"):
                raise UserError(f"--set {key}: the target of this study is the accuracy its baseline trial "
                                f"reaches after {self.baseline.target_epoch(scale)} epoch(s); see [baseline] in {self.shown}.")
        fixed = super().fixed(scale, overrides)
        for key in searched:
            fixed.pop(key, None)
        if self.targets_from_baseline:
            # What the baseline trial runs with; every later trial gets target_accuracy instead.
            fixed["target_from_epoch"] = self.baseline.target_epoch(scale)
        return fixed

    def fixed_for_checks(self, scale: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The fixed settings a check can build a config from: at a scale whose target is calibrated
        (its file read only when the study runs: studies/trial_target.py) a stand-in target."""
        fixed = self.fixed(scale, overrides)
        if self.target is not None and scale in self.target.epochs:
            fixed.update(target_from_epoch=0, target_accuracy=0.5)
        return fixed

    def searched_fields(self) -> list[str]:
        """Every config field the space sets (a compound parameter sets several)."""
        return [f for p in self.space.values() for f in p.field_names()]

    @property
    def targets_from_baseline(self) -> bool:
        if self.baseline is None:
            return False
        epochs = self.baseline.target_from_epoch
        return any(e > 0 for e in (epochs.values() if isinstance(epochs, dict) else [epochs]))

    def scale_of(self, study_name: str) -> str:
        """The scale a study of this file was run at, from its name ("study_x-cpu-1a2b3c4d")."""
        return study_name[len(self.name) + 1:].split("-")[0]

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

    where = spec.shown
    if spec.experiment not in experiments.names():
        raise UserError(f"study file {where}: unknown experiment '{spec.experiment}'; choose one of "
                        f"{', '.join(experiments.names())}.")
    experiment = experiments.get(spec.experiment)
    _check_metrics(spec, experiment)
    check_keys(spec.searched_fields(), read_by=spec.experiment)
    spec.check_read(spec.searched_fields())
    spec.check_fields()
    if spec.baseline is not None:
        check_baseline(spec)
    check_warm_starts(spec)
    _check_seeds_and_target(spec)
    _check_pruner(spec, experiment)
    for scale in spec.scales:
        _check_scale(spec, experiment, scale)


def _check_metrics(spec: StudySpec, experiment) -> None:
    """Each objective and [report] metric is one the experiment reports, once, in the direction
    that is better for it."""
    where = spec.shown
    for metric, direction in zip(spec.metrics, spec.directions):
        if not (experiment.has_metric(metric) or metric in HARNESS_METRICS):
            reported = dict.fromkeys((*experiment.metrics, *HARNESS_METRICS))  # in order, once each
            raise UserError(f"study file {where}: unknown metric '{metric}'; experiment {spec.experiment} "
                            f"reports {', '.join(reported)}.")
        sense = sense_of(experiment, metric)
        if sense and sense != direction:
            raise UserError(f"study file {where} asks to {direction} {metric}, which is better when "
                            f"{'higher' if sense == 'maximize' else 'lower'}; the direction should be {sense}.")
    if len(set(spec.metrics)) != len(spec.metrics):
        raise UserError(f"study file {where} names a metric twice in {spec.metrics}.")
    for metric in spec.report.get("metrics", []):
        if not (experiment.has_metric(metric) or metric in HARNESS_METRICS):
            raise UserError(f"study file {where}: [report] metrics names '{metric}', which experiment "
                            f"{spec.experiment} does not report.")


def _check_seeds_and_target(spec: StudySpec) -> None:
    """seeds_per_trial and [target] name scales of the file; a calibrated target needs a [baseline]."""
    where = spec.shown
    if isinstance(spec.seeds_per_trial, dict) and (unknown := [k for k in spec.seeds_per_trial if k not in spec.scales]):
        raise UserError(f"study file {where}: seeds_per_trial names scale '{unknown[0]}'; the scales are "
                        f"{', '.join(spec.scales)}.")
    if spec.target is not None:
        unknown = [k for k in spec.target.epochs if k not in spec.scales]
        if spec.baseline is None or unknown:
            raise UserError(f"study file {where}: [target] " + (f"names scale '{unknown[0]}'; the scales are "
                            f"{', '.join(spec.scales)}." if unknown else "is calibrated on the [baseline]; add one."))
        spec.check_read(["target_accuracy", "check_every_samples", "probe_size"])


def _check_pruner(spec: StudySpec, experiment) -> None:
    """A pruner only on one objective, reading a metric that goes the objective's way."""
    where, pruner = spec.shown, spec.pruner
    if pruner.active and spec.multi_objective:
        raise UserError(f"study file {where} has a pruner and {len(spec.metrics)} objectives; Optuna prunes "
                        "single-objective studies only, so remove [pruner] or keep one metric.")
    if pruner.active:
        reported = pruner.metric
        sense = sense_of(experiment, reported)
        if sense and sense != spec.directions[0]:
            raise UserError(f"study file {where}: the pruner reads {reported}, which is better when "
                            f"{'higher' if sense == 'maximize' else 'lower'}, but the study should "
                            f"{spec.directions[0]} {spec.metrics[0]}; prune on a metric going the same way.")


def _check_scale(spec: StudySpec, experiment, scale: str) -> None:
    """At one scale: the pruner's metric is reported, and each end of each range makes a valid config."""
    where, pruner = spec.shown, spec.pruner
    fixed = spec.fixed_for_checks(scale)
    if pruner.active and pruner.metric == EPOCH_METRIC \
            and not getattr(make_config(fixed), "eval_every_epoch", False):
        raise UserError(f"study file {where}: the pruner reads epoch_test_accuracy, which experiments "
                        "report only with eval_every_epoch = true; add it to [base].")
    for param in spec.space.values():
        for value in param.extremes():
            try:
                cfg = make_config({**fixed, **param.fields(value)})
            except UserError as err:
                raise UserError(f"study file {where}, scale {scale}: {param.name}={value!r} from the "
                                f"search space is not valid: {err}") from None
            experiment.check_model(getattr(cfg, "model", None), where=f"study file {where}, scale {scale}")



def sense_of(experiment, metric: str) -> str | None:
    """Which way is better for `metric` (maximize or minimize); None when neither is."""
    return experiment.sense.get(metric) or HARNESS_SENSE.get(metric)

def check_baseline(spec: StudySpec) -> None:
    """The baseline names one admissible value for every searched parameter and nothing else, and
    the experiment can compute the target it hands on."""
    where, baseline = spec.shown, spec.baseline
    missing = [k for k in spec.space if k not in baseline.params]
    extra = [k for k in baseline.params if k not in spec.space]
    if missing or extra:
        raise UserError(f"study file {where}: [baseline] params must give a value for each [space] parameter; "
                        + (f"'{missing[0]}' is missing." if missing else f"'{extra[0]}' is not searched."))
    for name, value in baseline.params.items():
        if not spec.space[name].admits(value):
            raise UserError(f"study file {where}: [baseline] {name} = {value!r} is not a value [space] "
                            f"allows for {name}.")
    if isinstance(baseline.target_from_epoch, dict):
        unknown = [k for k in baseline.target_from_epoch if k not in spec.scales]
        if unknown:
            raise UserError(f"study file {where}: [baseline] target_from_epoch names scale '{unknown[0]}'; "
                            f"the scales are {', '.join(spec.scales)}.")
    for scale in spec.scales:
        epochs, budget = baseline.target_epoch(scale), make_config(spec.fixed_for_checks(scale)).epochs
        if epochs > budget:
            raise UserError(f"study file {where}: at scale {scale} the target is the baseline's accuracy after "
                            f"epoch {epochs}, but trials train at most {budget} epoch(s).")
    if spec.targets_from_baseline:
        spec.check_read(["target_accuracy", "target_from_epoch"])
