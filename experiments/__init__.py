"""Registry of the documents' experiments. Each is a module with a plain `run(cfg, on_epoch=None) ->
metrics` and one module-level `EXPERIMENT` descriptor saying what it is: its clock, whether it
trains on a dataset, the metrics it returns, the config fields it reads and a smoke config. The
CLI, the sweep engine, the study engine and the tests all call that same `run`.

A metric value that is a string (a captured warning, the dtype autocast produced) is a note: it
is logged as the tag `harness.note.<key>` instead of a metric.

A new experiment is its module (with `EXPERIMENT = Experiment(...)`) plus one line in REGISTRY.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from harness.errors import UserError

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.train import EpochCallback

# name -> module; ONE line per experiment. Modules are imported only when asked for (get), so
# validating a name costs no torch/NNI import.
REGISTRY: dict[str, str] = {
    "pruning": "experiments.pruning",
    "amp": "experiments.amp",
    "hybridize": "experiments.hybridize",
    "async": "experiments.asynchronous",
    "data_parallel": "experiments.data_parallel",
    "dp_scratch": "experiments.dp_scratch",
    "autoparallel": "experiments.autoparallel",
    "recipe": "experiments.recipe",
    "formats": "experiments.formats",
    "airbench": "experiments.airbench",
}

# Fields a cell may always set, whatever its experiment:
# - experiment: chooses the descriptor itself;
# - repeat: tells identical cells apart (it is part of the cell id); no run() reads it;
# - threads: the harness sets it on every cell when it splits a machine's cores between workers
#   (the sweep and study engines, and OMP_NUM_THREADS for each worker), so it applies to
#   every experiment even where run() itself never calls torch.set_num_threads (autoparallel).
# seed and device are not here: every experiment reads them, so they are in every `reads`.
ALWAYS_ALLOWED = frozenset({"experiment", "repeat", "threads"})

# A metric name with `{i}` stands for one metric per index: rank{i}_train_time_s is rank0_..., rank1_...
_INDEX = "{i}"


@dataclass(frozen=True)
class Experiment:
    name: str                      # registry name, e.g. "pruning"
    title: str                     # one line for `harness list`
    run: Callable[["RunConfig", "EpochCallback | None"], dict]  # the module's run(cfg, on_epoch=None)
    clock: str                     # what its timings contain (logged as the harness.clock tag)
    needs_dataset: bool            # False: makes its own inputs; no dataset preflight, no epoch bar
    metrics: tuple[str, ...]       # every numeric metric run() can return, on any branch
    reads: frozenset[str]          # the RunConfig fields run() reads, itself or through harness helpers
    smoke: Mapping[str, Any]       # a tiny config (without "experiment") that runs offline in seconds on CPU
    notes: tuple[str, ...] = ()    # string values run() can return (logged as tags)
    models: tuple[str, ...] | None = None  # the models run() can train; None: any, or it reads none

    def check_model(self, model: str, *, where: str = "") -> None:
        """UserError when run() cannot train `model`: refused before any run is made, not found
        half-way through a cell."""
        if self.models is not None and model not in self.models:
            prefix = f"{where}: " if where else ""
            raise UserError(f"{prefix}experiment '{self.name}' cannot train model '{model}'; it trains "
                            f"{', '.join(self.models)}.")

    def has_metric(self, key: str) -> bool:
        """Whether `key` is one of `metrics` (rank3_train_time_s is rank{i}_train_time_s)."""
        return any(metric_matches(m, key) for m in self.metrics)


def metric_matches(declared: str, key: str) -> bool:
    """`key` is the declared metric name, or an instance of it when the name holds `{i}`."""
    if _INDEX not in declared:
        return key == declared
    return re.fullmatch(re.escape(declared).replace(re.escape(_INDEX), r"\d+"), key) is not None


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Experiment:
    """The experiment's descriptor (its module is imported here, on first use)."""
    if name not in REGISTRY:
        raise UserError(f"unknown experiment '{name}'; choose one of {', '.join(REGISTRY)}.")
    return importlib.import_module(REGISTRY[name]).EXPERIMENT


def check_reads(name: str, keys: Iterable[str], *, where: str = "") -> None:
    """UserError when a key is not a config field, or is one experiment `name` never reads (setting it
    would change nothing but the cell's id). `where` ("sweep file X") starts the sentence."""
    from harness.config import check_keys

    keys = list(keys)
    prefix = f"{where}: " if where else ""
    try:
        check_keys(keys)
        experiment = get(name)
    except UserError as err:
        raise UserError(f"{prefix}{err}") from None
    ignored = [k for k in keys if k not in experiment.reads and k not in ALWAYS_ALLOWED]
    if ignored:
        raise UserError(f"{prefix}experiment '{name}' does not read '{ignored[0]}'; it reads: "
                        f"{', '.join(sorted(experiment.reads))}.")
