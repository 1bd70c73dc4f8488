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

from harness.config import RunConfig, check_keys, make_config
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
    for section in (spec.base, spec.grid, *spec.scales.values()):
        check_keys(section)
    for axis, values in spec.grid.items():
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
    check_keys(overrides)
    grid = dict(spec.grid)
    fixed = {"experiment": spec.experiment, **spec.base, **spec.scales[scale]}
    # A scale may narrow or widen a grid axis (a list replaces it, a single value pins it).
    for key, value in spec.scales[scale].items():
        if key in grid:
            grid[key] = value if isinstance(value, list) else [value]
    for key, value in overrides.items():
        if isinstance(value, list):
            grid[key] = value
        elif key in grid:
            grid[key] = [value]
        else:
            fixed[key] = value
    for key in grid:
        fixed.pop(key, None)
    make_config(fixed)  # a bad value shared by every cell fails the whole sweep, before anything runs

    cells = []
    axes = list(grid)
    for combo in itertools.product(*(grid[a] for a in axes)):
        for repeat in range(spec.repeats):
            values = {**fixed, **dict(zip(axes, combo))}
            if spec.repeats > 1:
                values["repeat"] = repeat
            label = " ".join(f"{a}={v}" for a, v in zip(axes, combo)) or spec.name
            if spec.repeats > 1:
                label += f" r{repeat}"
            cell = Cell(values, label)
            try:
                cell.config = make_config(values)
            except UserError as err:
                cell.error = str(err)
            cells.append(cell)
    return cells
