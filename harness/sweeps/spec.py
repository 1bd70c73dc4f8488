"""Sweep definitions: one TOML file per published table under sweeps/, holding the document's
settings (base), the axes (grid), smaller scales, and the published figures the report sets beside
ours. This module reads a file and expands it into cells; it runs nothing."""

from __future__ import annotations

import itertools
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, field_validator, model_validator

import experiments
from harness import specfile
from harness.cells import Cell
from harness.config import check_keys, make_config
from harness.errors import UserError
from harness.specfile import SCALES, SWEEPS_DIR, SpecFile

__all__ = ["Cell", "SCALES", "SWEEPS_DIR", "SweepSpec", "available", "expand", "load"]


def _well_formed_check(check: dict[str, Any]) -> dict[str, Any]:
    """A [[checks]] entry the report can judge, or one sentence on what is wrong with it. The report
    layer owns the check kinds (harness/report/checks.py); reading them here stops a sweep with a
    mistyped check before it runs rather than after."""
    from harness.report.checks import problem

    wrong = problem(check)
    if wrong:
        raise ValueError(wrong)
    return check


class SweepSpec(SpecFile):
    kind: ClassVar[str] = "sweep"
    grid: dict[str, list] = {}
    repeats: int = Field(1, ge=1)
    report: dict[str, Any] = {}
    published: dict[str, Any] = {}
    checks: list[Annotated[dict[str, Any], AfterValidator(_well_formed_check)]] = []
    # A scale may replace grid axes (`[scales.smoke.grid]`): the shapes that fit a small machine.
    scale_grids: dict[str, dict[str, list]] = {}
    # MLflow's system metrics (CPU, memory, GPU use) sampled in every cell; unset: on where a CUDA
    # GPU is present. `harness sweep --system-metrics / --no-system-metrics` overrides it.
    system_metrics: bool | None = None

    def system_metrics_on(self) -> bool:
        from harness.cells import system_metrics_default

        return system_metrics_default() if self.system_metrics is None else self.system_metrics

    @field_validator("grid")
    @classmethod
    def _axes_not_empty(cls, grid: dict[str, list]) -> dict[str, list]:
        for axis, values in grid.items():
            if not values:
                raise ValueError(f"grid axis '{axis}' must be a non-empty list")
        return grid

    @model_validator(mode="after")
    def _split_scale_grids(self) -> "SweepSpec":
        for name, scale in self.scales.items():
            grid = scale.get("grid")
            if grid is None:
                continue
            if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
                raise ValueError(f"[scales.{name}.grid] must map each axis to a non-empty list")
            self.scale_grids[name] = grid
        return self

    def axes(self) -> list[str]:
        """The config fields the grid varies, compound axes flattened, over every scale."""
        names: list[str] = []
        for grid in (self.grid, *self.scale_grids.values()):
            for axis, values in grid.items():
                for name in (_compound_keys(values) or [axis]):
                    if name not in names:
                        names.append(name)
        return names


def _compound_keys(values: list) -> list[str]:
    """A compound axis (values are tables, like `{world_size = 2, threads = 8}`) varies several
    fields together; its name is only a label. Returns its fields, or [] for a plain axis."""
    if not (isinstance(values, list) and values and all(isinstance(v, dict) for v in values)):
        return []
    keys: list[str] = []
    for value in values:
        keys += [k for k in value if k not in keys]
    return keys


def available() -> list[str]:
    return sorted(p.stem for p in SWEEPS_DIR.glob("*.toml") if not p.stem.startswith("study_"))


def load(name_or_path: str) -> SweepSpec:
    path = specfile.find(name_or_path, folder=SWEEPS_DIR, prefix="", kind="sweep", available=available())
    spec = specfile.read(path, SweepSpec)
    spec.title = spec.title or spec.name
    spec.check_fields()
    for grid in (spec.grid, *spec.scale_grids.values()):
        keys = [k for axis, values in grid.items() for k in (_compound_keys(values) or [axis])]
        spec.check_read(keys)  # an unknown key too, named with the file
    return spec


def expand(spec: SweepSpec, scale: str = "full", overrides: dict[str, Any] | None = None) -> list[Cell]:
    """Every cell of the grid at a scale. A scale's value for a grid axis, and then an override of
    it, replaces that axis (a list becomes the axis, a single value pins it); any other override
    applies to every cell."""
    overrides = dict(overrides or {})
    check_keys(overrides)
    spec.check_read(overrides)
    scale_values = spec.scale_values(scale)
    grid = {**spec.grid, **spec.scale_grids.get(scale, {})}
    fixed = spec.fixed(scale)
    # A scale may narrow or widen a grid axis (a list replaces it, a single value pins it).
    for key, value in scale_values.items():
        if key in grid:
            grid[key] = value if isinstance(value, list) else [value]
    compound = {k: axis for axis, values in grid.items() for k in _compound_keys(values)}
    for key, value in overrides.items():
        if key in compound:
            raise UserError(f"'{key}' is varied together with other fields by the grid axis "
                            f"'{compound[key]}' of {spec.path}; edit that axis in the sweep file instead.")
        if isinstance(value, list):
            if not value:
                raise UserError(f"--set {key}=[] leaves the sweep no cell to run; give at least one value.")
            grid[key] = value
        elif key in grid:
            grid[key] = [value]
        else:
            fixed[key] = value
    for key in [*grid, *compound]:
        fixed.pop(key, None)
    make_config(fixed)  # a bad value shared by every cell fails the whole sweep, before anything runs

    cells = []
    axes = list(grid)
    for combo in itertools.product(*(grid[a] for a in axes)):
        for repeat in range(spec.repeats):
            values = dict(fixed)
            for axis, value in zip(axes, combo):
                values.update(value if axis in compound.values() else {axis: value})
            if spec.repeats > 1:
                values["repeat"] = repeat
            label = " ".join(_label(a, v) for a, v in zip(axes, combo)) or spec.name
            if spec.repeats > 1:
                label += f" r{repeat}"
            cells.append(Cell.build(values, label))
    _check_every_cell(spec, cells, overrides)
    if not cells:  # an empty axis from a scale or a file: nothing would run, yet a parent run would say done
        raise UserError(f"sweep {spec.name} at scale {scale} has no cell to run; every grid axis needs a value.")
    experiment = experiments.get(spec.experiment)
    for model in dict.fromkeys(c.config.model for c in cells if c.config is not None):
        experiment.check_model(model, where=f"sweep {spec.name}")
    return cells


def _check_every_cell(spec: SweepSpec, cells: list[Cell], overrides: dict[str, Any]) -> None:
    """A bad value anywhere in the grid (a list in the file or in --set) stops the sweep before any
    run, like a bad shared value: a cell recorded as failed would sit in every later report."""
    bad = next((c for c in cells if c.error is not None), None)
    if bad is None:
        return
    for key, value in overrides.items():  # `--set sparsity=0.5,0.6` meant a list
        if isinstance(value, str) and "," in value and f"'{key}'" in bad.error:
            listed = ",".join(v.strip() for v in value.split(","))
            raise UserError(f"--set {key}={value} is not one value; write a list as --set {key}=[{listed}] "
                            f"to sweep {key} over it.")
    raise UserError(f"sweep {spec.name}, cell '{bad.label}': {bad.error}")


def _label(axis: str, value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return f"{axis}={value}"
