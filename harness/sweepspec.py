"""Sweep definitions: one TOML file per published table under sweeps/, holding the document's
settings (base), the axes (grid), smaller scales, and the published figures the report sets beside
ours. This module reads a file and expands it into cells; it runs nothing."""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import check_reads
from harness.config import RunConfig, make_config
from harness.errors import UserError
from harness.fingerprint import REPO_ROOT

SWEEPS_DIR = REPO_ROOT / "sweeps"
SCALES = ("smoke", "quick", "full")


@dataclass
class SweepSpec:
    name: str
    title: str
    experiment: str
    base: dict[str, Any]
    grid: dict[str, list]
    scales: dict[str, dict[str, Any]]
    repeats: int = 1
    source: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    published: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = None
    # A scale may replace grid axes (`[scales.smoke.grid]`): the shapes that fit a small machine.
    scale_grids: dict[str, dict[str, list]] = field(default_factory=dict)

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


@dataclass
class Cell:
    values: dict[str, Any]          # what the cell asks for, before validation
    label: str                      # readable run name, e.g. "sparsity=0.5"
    config: RunConfig | None = None
    error: str | None = None        # why the values are not a valid config

    @property
    def cell_id(self) -> str:
        if self.config is not None:
            return self.config.cell_id()
        return hashlib.sha1(json.dumps(self.values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def available() -> list[str]:
    return sorted(p.stem for p in SWEEPS_DIR.glob("*.toml") if not p.stem.startswith("study"))


def load(name_or_path: str) -> SweepSpec:
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.is_file()):
        path = SWEEPS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise UserError(f"unknown sweep '{name_or_path}'; choose one of {', '.join(available())} "
                        "or give the path of a sweep .toml file.")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"sweep file {path} is not valid TOML: {err}.") from None
    try:
        spec = SweepSpec(
            name=raw["name"], title=raw.get("title", raw["name"]), experiment=raw["experiment"],
            base=raw.get("base", {}), grid=raw.get("grid", {}),
            scales={s: raw.get("scales", {}).get(s, {}) for s in SCALES} | raw.get("scales", {}),
            repeats=int(raw.get("repeats", 1)), source=raw.get("source", ""), report=raw.get("report", {}),
            published=raw.get("published", {}), checks=raw.get("checks", []), path=path,
        )
    except KeyError as err:
        raise UserError(f"sweep file {path} lacks the required key {err}.") from None
    for name, scale in spec.scales.items():
        if isinstance(scale.get("grid"), dict):
            spec.scale_grids[name] = scale.pop("grid")
    # Unknown keys, and keys the experiment never reads (they would change nothing but the cell id).
    check_reads(spec.experiment, [*spec.base, *(k for s in spec.scales.values() for k in s), *spec.axes()],
                where=f"sweep file {path}")
    for grid in (spec.grid, *spec.scale_grids.values()):
        for axis, values in grid.items():
            if not isinstance(values, list) or not values:
                raise UserError(f"grid axis '{axis}' in {path} must be a non-empty list.")
    return spec


def expand(spec: SweepSpec, scale: str = "full", overrides: dict[str, Any] | None = None) -> list[Cell]:
    """Every cell of the grid at a scale. A scale's value for a grid axis, and then an override of
    it, replaces that axis (a list becomes the axis, a single value pins it); any other override
    applies to every cell."""
    if scale not in spec.scales:
        raise UserError(f"unknown scale '{scale}'; choose one of {', '.join(spec.scales)}.")
    overrides = dict(overrides or {})
    check_reads(spec.experiment, overrides)
    grid = {**spec.grid, **spec.scale_grids.get(scale, {})}
    fixed = {"experiment": spec.experiment, **spec.base, **spec.scales[scale]}
    # A scale may narrow or widen a grid axis (a list replaces it, a single value pins it).
    for key, value in spec.scales[scale].items():
        if key in grid:
            grid[key] = value if isinstance(value, list) else [value]
    compound = {k: axis for axis, values in grid.items() for k in _compound_keys(values)}
    for key, value in overrides.items():
        if key in compound:
            raise UserError(f"'{key}' is varied together with other fields by the grid axis "
                            f"'{compound[key]}' of {spec.path}; edit that axis in the sweep file instead.")
        if isinstance(value, list):
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
            cell = Cell(values, label)
            try:
                cell.config = make_config(values)
            except UserError as err:
                cell.error = str(err)
            cells.append(cell)
    return cells


def _label(axis: str, value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return f"{axis}={value}"
