"""Registry of the documents' experiments. Each is a module with a plain `run(cfg, on_epoch=None) ->
metrics` (experiments/NAME.py) and, beside it, its descriptor (experiments/descriptors/NAME.py): its
config class and one module-level `EXPERIMENT` saying what it is: its clock, whether it trains on a
dataset, the metrics it returns (and which way is better), its config class and a smoke config. The
CLI, the sweep engine, the study engine and the tests all call that same `run`.

The descriptor imports neither torch nor its run module (`RunTarget` imports the run on its first
call), so names, keys and values are checked, and `harness list` lists, in a fraction of a second,
before anything heavy is loaded.

An experiment's config class is `harness.fields.config.RunConfig` plus the field groups its run
reads (through the harness helpers it calls: the shared ones of `harness.fields.field_groups`, and
those no other experiment reads, declared in its descriptor) plus fields of its own: its fields are
what it reads, so a sweep that sets any other field is refused ("does not read"). Configs are built
here (`make_config`), where the experiment's name chooses the class.

A metric value that is a string (a captured warning, the dtype autocast produced) is a note: it
is logged as the tag `harness.note.<key>` instead of a metric.

A new experiment is two files and its sweep file: its run module and its descriptor (its card, a
config class and `EXPERIMENT = Experiment(name=...)`), found by that file (experiments/descriptors/
__init__.py reads the names from the descriptors' source): there is no list of experiments to edit.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping

from experiments import descriptors
from harness.errors import UserError

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

    from harness.fields.config import RunConfig
    from harness.training.train import EpochCallback

DEFAULT_EXPERIMENT = "pruning"  # the experiment of a config whose values name none

# A metric name with `{i}` stands for one metric per index: rank{i}_train_time_s is rank0_..., rank1_...
_INDEX = "{i}"

Sense = Literal["maximize", "minimize"]
# Which way is better for the metrics the training experiments share (a study asking the other way
# is a mistake); an experiment passes it as its `sense`, with its own metrics added.
TRAINING_SENSE: Mapping[str, Sense] = {
    "test_accuracy": "maximize", "epoch_test_accuracy": "maximize", "samples_per_s": "maximize",
    "train_time_s": "minimize", "epoch_time_median_s": "minimize", "epoch_time_iqr_s": "minimize",
    "param_count": "minimize", "peak_rss_mb": "minimize", "train_loss": "minimize",
    "time_to_accuracy_s": "minimize", "mfu": "maximize", "achieved_tflops": "maximize",
}

# The backend of an experiment that trains on DDP ranks: gloo between CPU processes, nccl between GPUs
# (gloo there would allreduce through host memory, and placement refuses it).
DDP_BACKENDS: Mapping[str, str] = {"cpu": "gloo", "cuda": "nccl"}

@dataclass(frozen=True)
class RunTarget:
    """An experiment's `run`, named "module:function" and imported on its first call: the descriptor
    that holds it is read (its config checked, `harness list` printed) without importing torch."""
    target: str   # "experiments.pruning:run"

    def __call__(self, cfg: "RunConfig", on_epoch: "EpochCallback | None" = None) -> dict:
        return self.resolve()(cfg, on_epoch)

    def resolve(self) -> Callable:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Experiment:
    name: str                      # registry name, e.g. "pruning"
    title: str                     # one line for `harness list`
    run: Callable[["RunConfig", "EpochCallback | None"], dict]  # its run(cfg, on_epoch=None), often a RunTarget
    config: type["RunConfig"]      # its config class: the fields run() reads, itself or through harness helpers
    clock: str                     # what its timings contain (logged as the harness.clock tag)
    needs_dataset: bool            # False: makes its own inputs; no dataset preflight, no epoch bar, no --data-dir
    metrics: tuple[str, ...]       # every numeric metric run() can return, on any branch
    smoke: Mapping[str, Any]       # a tiny config (without "experiment") that runs offline in seconds on CPU
    notes: tuple[str, ...] = ()    # string values run() can return (logged as tags)
    models: tuple[str, ...] | None = None  # the models run() can train; None: any, or it reads none
    sense: Mapping[str, Sense] = field(default_factory=dict)  # which way is better, for the metrics that have one
    input_shape: tuple[int, int, int] | None = None  # the shape its data is loaded at, when it has no `model`
    # The torch.distributed backend its ranks use on each kind of device ("cpu", "cuda"): what
    # `--device` (make's DEVICE) sets with the device. Every experiment whose config has a `backend`
    # names one for each kind, so a sweep moved to GPUs never runs gloo there.
    backends: Mapping[str, str] = field(default_factory=dict)

    @property
    def run_module(self) -> str:
        """The module its run lives in (named, not imported, for a RunTarget)."""
        return self.run.target.partition(":")[0] if isinstance(self.run, RunTarget) else self.run.__module__

    @property
    def reads(self) -> frozenset[str]:
        """The config fields run() reads: its config class's fields."""
        return frozenset(self.config.model_fields)

    def check_model(self, model: str | None, *, where: str = "") -> None:
        """UserError when run() cannot train `model` (None: the experiment has no model field):
        refused before any run is made, not found half-way through a cell."""
        if self.models is not None and model not in self.models:
            prefix = f"{where}: " if where else ""
            raise UserError(f"{prefix}experiment '{self.name}' cannot train model '{model}'; it trains "
                            f"{', '.join(self.models)}.")

    def backend_for(self, device: str) -> str | None:
        """The backend for a device ("cuda:1" is a cuda device); None where the experiment has none."""
        return self.backends.get(device.partition(":")[0]) if "backend" in self.reads else None

    def has_metric(self, key: str) -> bool:
        """Whether `key` is one of `metrics` (rank3_train_time_s is rank{i}_train_time_s)."""
        return any(metric_matches(m, key) for m in self.metrics)

    def data_shape(self, cfg: "RunConfig") -> tuple[int, int, int]:
        """The shape the cell's dataset is loaded at: its model's input, or `input_shape`."""
        if self.input_shape is not None:
            return self.input_shape
        from harness.fields.catalogue import MODELS

        return MODELS[cfg.model].input_shape


def metric_matches(declared: str, key: str) -> bool:
    """`key` is the declared metric name, or an instance of it when the name holds `{i}`."""
    if _INDEX not in declared:
        return key == declared
    return re.fullmatch(re.escape(declared).replace(re.escape(_INDEX), r"\d+"), key) is not None


def registry() -> dict[str, str]:
    """name -> descriptor module, by name: each module of experiments/descriptors/ that declares an
    experiment, found from its source. Descriptors are imported only when asked for (get), and none
    of them imports torch."""
    return descriptors.found()


def names() -> list[str]:
    return list(registry())


def get(name: str) -> Experiment:
    """The experiment's descriptor (its module is imported here, on first use)."""
    found = registry()
    if name not in found:
        raise UserError(f"unknown experiment '{name}'; choose one of {', '.join(found)}.")
    return importlib.import_module(found[name]).EXPERIMENT


def run_modules() -> list[str]:
    """The modules the experiments' runs live in, for a process that imports them all ahead of the
    first cell (a study's fork server, whose every trial would otherwise import its run afresh)."""
    return sorted({get(name).run_module for name in registry()})


def card(name: str) -> str:
    """The experiment's card, its descriptor's docstring: the question it answers (the first
    paragraph), then its fields, procedure and metrics."""
    get(name)   # an unknown name is one sentence
    return (importlib.import_module(registry()[name]).__doc__ or "").strip()


def all_fields() -> dict[str, "FieldInfo"]:
    """Every config field of any experiment (one name is one field in every class that has it), in
    the experiments' order (by name); for `harness list`, and to tell another experiment's field from
    a typo. Imports every experiment module."""
    return _all_fields(tuple(registry().items()))


@functools.lru_cache(maxsize=4)
def _all_fields(found: tuple[tuple[str, str], ...]) -> dict[str, "FieldInfo"]:
    fields: dict[str, FieldInfo] = {}
    for name, _ in found:
        for key, info in get(name).config.model_fields.items():
            fields.setdefault(key, info)
    return fields


def field_help() -> list[tuple[str, str, str]]:
    """(name, default, description) for every config field, by name, for `harness list`."""
    return [(n, repr(f.default), f.description or "") for n, f in sorted(all_fields().items())]


def make_config(values: Mapping[str, Any]) -> "RunConfig":
    """The config of the experiment `values` names (DEFAULT_EXPERIMENT when none), validated; a
    mistake is a UserError of one sentence per mistake."""
    from pydantic import ValidationError

    from harness.fields.config import describe_validation_error

    name = values.get("experiment", DEFAULT_EXPERIMENT)
    if not isinstance(name, str) or name not in registry():
        raise UserError(f"config field 'experiment' is not known; choose one of {', '.join(names())} "
                        f"(got {name!r}).")
    cls = get(name).config
    try:
        return cls(**{**values, "experiment": name})
    except ValidationError as err:
        raise UserError(describe_validation_error(err, name, cls, all_fields())) from None


def check_keys(keys: Iterable[str], *, read_by: str | None = None) -> None:
    """UserError when a key is no field of any experiment's config. A key experiment `read_by` reads
    is a field without asking the others: only another key imports every experiment module."""
    from harness.fields.config import unknown_key_sentence

    keys = list(keys)
    if read_by in registry():
        reads = get(read_by).reads
        keys = [k for k in keys if k not in reads]
    if not keys:
        return
    known = all_fields()
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise UserError(unknown_key_sentence(unknown[0], list(known)))


def check_reads(name: str, keys: Iterable[str], *, where: str = "") -> None:
    """UserError when a key is not a config field, or is one experiment `name` never reads (setting it
    would change nothing but the cell's id). `where` ("sweep file X") starts the sentence."""
    from harness.fields.config import not_read_sentence

    keys = list(keys)
    prefix = f"{where}: " if where else ""
    try:
        experiment = get(name)
        ignored = [k for k in keys if k not in experiment.reads]
        if ignored:  # only now is every experiment imported, to tell a field of another from a typo
            check_keys(ignored)
    except UserError as err:
        raise UserError(f"{prefix}{err}") from None
    if ignored:
        raise UserError(f"{prefix}{not_read_sentence(name, ignored[0], experiment.config)}")
