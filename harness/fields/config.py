"""The typed configuration every experiment, sweep cell and study trial is run from: the execution
fields every experiment has (`RunConfig`), a cell's identity, and one sentence per mistake.

Each experiment's config is a class of its own, `RunConfig` plus the field groups its `run` reads
(harness/fields/field_groups.py) and fields of its own, declared in its module; the registry
(experiments/__init__.py) knows which class belongs to which name and builds configs from values.
A field keeps one name, default and meaning in every class it is part of, so it becomes the same
MLflow param whatever the experiment, and the compare view lines up grid cells, study trials and
single runs.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
from pathlib import Path
from typing import Annotated, Any, Collection, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import UserError, full_stop, mistakes
from harness.machine.device_names import parse_device
from harness.suggest import did_you_mean


class FieldGroup(BaseModel):
    """A few fields that belong together; an experiment's config class inherits the groups it reads."""
    # allow_inf_nan=False: `lr = inf` or `nan` is refused like any other bad value.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)


# The largest seed every generator a run seeds accepts: numpy's legacy seeding (RandomState, which
# scikit-learn and NNI use) takes 0 .. 2**32 - 1, torch.manual_seed up to 2**64 - 1. A larger one
# was accepted and failed every cell at run time.
SEED_MAX = 2**32 - 1


class RunConfig(FieldGroup):
    """The execution fields: every experiment's config class has them. `repeat` tells identical
    cells apart; `threads` is set on every cell when the harness splits a machine's cores between
    workers, even where run() itself never sets torch's threads."""

    experiment: str = Field("pruning", description="Experiment module to run (see `harness list`).")
    device: str = Field("cpu", description="cpu, cuda or cuda:N.")
    threads: int = Field(0, ge=0, description="Intra-op threads (torch.set_num_threads); 0 = all cores this process may use.")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="Seed for model init, data order and synthetic data "
                      f"(0 to {SEED_MAX:,}: what numpy's and torch's generators both take).")
    repeat: int = Field(0, ge=0, description="Repeat index of an otherwise identical cell (timing repeats).")
    malloc: Literal["glibc_default", "keep_freed"] = Field(
        "glibc_default", description="What glibc's malloc does with freed memory in the process that trains the "
        "cell: glibc_default (as a plain python process has it) or keep_freed (reused, never returned to the "
        "kernel, so a step's tensors are not page-faulted in again each step); harness/training/allocator.py.")

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        parse_device(value)   # the one reading of a device name (ValueError: "must be cpu, cuda or cuda:N")
        return value

    # --- identity ------------------------------------------------------------------------------
    def non_default_items(self) -> dict[str, Any]:
        defaults = type(self).model_construct()
        return {k: v for k, v in self.model_dump().items() if getattr(defaults, k) != v or k == "experiment"}

    def cell_id(self) -> str:
        """Identifies what is measured: the fields that differ from the defaults, and the version
        of the procedure that measures them.

        Hashing only non-default values keeps the id of an old cell stable when a new field
        (with a default) is added to a config class later. A change to what the same fields measure
        bumps MEASUREMENT_PROCEDURE instead, so a resumed sweep re-measures those cells rather
        than reusing records made the old way.
        """
        canonical = json.dumps(self.non_default_items(), sort_keys=True, default=str)
        if MEASUREMENT_PROCEDURE > 1:
            canonical = f"procedure {MEASUREMENT_PROCEDURE}: {canonical}"
        return hashlib.sha1(canonical.encode()).hexdigest()[:16]


# 1: warm-up epochs were trained and kept. 2: warm-up epochs are undone
# (harness/training/warmup.py), so a cell trains exactly its epochs; T6.1's unpruned row no longer pre-trains.
# 3: convolution FLOPs count groups (a depthwise conv's weight gradient was counted once per
# group), the MFU peak is per thread count from several kernels, and a one-process cell with a
# backend other than gloo on a CPU is a skip: old records' MFU and their duplicate cell are wrong.
# 4: repeat round r trains with seed base + r (harness/specs/sweep_spec.py), where every round
# trained the base seed: a repeat is now a draw over seeds, so its accuracy has an interval. A
# procedure-3 repeat trained the same seed as round 0; reused as a round of a procedure-4 row it
# would count the same training twice as two seeds, so every id moves (round 0's too: a row's
# rounds are then all of one procedure) and a resumed sweep measures its cells again.
MEASUREMENT_PROCEDURE = 4
SEEDED_ROUNDS_FROM = 4   # the first procedure whose round r trains seed base + r (a report reads it per cell)


def positive_int(value: int) -> int:
    """The check of every count that must be at least 1."""
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


# A count of at least 1, with the harness's sentence for a mistake (pydantic's gt=0 says "greater than 0").
PositiveInt = Annotated[int, AfterValidator(positive_int)]


def fields_read(cls: type[RunConfig]) -> list[str]:
    """The fields of a config class a sweep may set, as the refusal names them."""
    return sorted(name for name in cls.model_fields if name != "experiment")


def not_read_sentence(experiment: str, key: str, cls: type[RunConfig]) -> str:
    return f"experiment '{experiment}' does not read '{key}'; it reads: {', '.join(fields_read(cls))}."


def unknown_key_sentence(key: str, known: Collection[str]) -> str:
    return f"unknown config key '{key}'; {did_you_mean(key, known)}known keys: {', '.join(known)}."


def describe_validation_error(err: ValidationError, experiment: str, cls: type[RunConfig],
                              known: Collection[str]) -> str:
    """One sentence per mistake, naming the field, what it got and what it accepts (harness/errors.py's
    words). `known`: the fields of every experiment, so a key of another experiment's class is told
    apart from a typo."""
    sentences = []
    for mistake in mistakes(err):
        if mistake.type == "extra_forbidden":
            sentences.append(not_read_sentence(experiment, mistake.key, cls) if mistake.key in known
                             else unknown_key_sentence(mistake.key, known))
        else:
            sentences.append(full_stop(mistake.sentence("config")))
    return " ".join(sentences)


def parse_assignment(text: str) -> tuple[str, Any]:
    """Parse one `--set key=value`. A JSON list value (`sparsity=[0.1,0.5]`) becomes a sweep axis.
    Whether the key is a field is the registry's question (`experiments.check_keys`)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set expects key=value, got '{text}'.")
    raw = raw.strip()
    if raw.startswith("["):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise UserError(f"--set {key}: '{raw}' is not a valid list; write it like [0.1,0.5].") from None
    else:
        value = raw
    for item in value if isinstance(value, list) else [value]:
        if not is_finite(item):
            raise UserError(f"--set {key}: {item!r} is not a finite number; give a finite value.")
    return key, value


def is_finite(value: Any) -> bool:
    """False for inf and nan, whether a float or text a number parser would read as one ("inf",
    "-Infinity", "nan"); True for everything else."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return True
    return not isinstance(value, float) or math.isfinite(value)


# A config handed to other processes as a JSON file (torchrun ranks, Slurm tasks) is read back
# as the class named here, which the launcher puts in their environment.
CLASS_ENV = "HARNESS_CONFIG_CLASS"


def class_name(cfg: RunConfig) -> str:
    return f"{type(cfg).__module__}:{type(cfg).__qualname__}"


def read_config_file(path: Path) -> RunConfig:
    """The config a launcher wrote to `path`, as the class in HARNESS_CONFIG_CLASS."""
    name = os.environ.get(CLASS_ENV)
    if not name:
        raise RuntimeError(f"{CLASS_ENV} is not set: the launcher names the config class of {path} there")
    module, _, qualname = name.partition(":")
    cls = getattr(importlib.import_module(module), qualname)
    return cls.model_validate_json(Path(path).read_text())
