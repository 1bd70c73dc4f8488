"""A run re-measured outside a study's trials, as a variant of its [space]: which parameters, which lr
factor over the study's own, and what it changes beyond speed; its config values at a seed. The
verification, the race and the target calibration build their runs from these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments import make_config
from harness.specs.study_spec import StudySpec


@dataclass
class Variant:
    role: str                     # "best", "baseline", "tuned", "lr x2", "alone: dtype", "without: dtype"
    params: dict[str, Any]        # a value for each [space] parameter
    lr_factor: float = 1.0
    note: str = ""                # what it changes beyond speed


def searches_lr(spec: StudySpec) -> bool:
    """Whether the study's space holds the lr factor: then its tuned baseline is the book's params at
    the tuned factor, and the winner is ablated against that."""
    return "lr_factor" in spec.space


def own_factor(spec: StudySpec, params: dict[str, Any]) -> float:
    """The lr factor a variant's params set themselves (a study that searches `lr_factor`), else 1."""
    return float(params.get("lr_factor", 1.0)) if searches_lr(spec) else 1.0


def params_of(spec: StudySpec, stored: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as [space] values (a compound choice back from its label)."""
    return {k: spec.space[k].from_label(v) if spec.space[k].compound else v for k, v in stored.items()}


def values_of(spec: StudySpec, fixed: dict[str, Any], variant: Variant, seed: int) -> dict[str, Any]:
    values = dict(fixed)
    for k, value in variant.params.items():
        values.update(spec.space[k].fields(value))
    values["seed"] = seed
    if variant.lr_factor != 1.0:
        config = make_config(values)
        if hasattr(config, "lr_factor"):   # the same field a study trial sets: the same run is the same cell
            values["lr_factor"] = config.lr_factor * variant.lr_factor
        else:
            values["lr"] = config.lr * variant.lr_factor
    return values
