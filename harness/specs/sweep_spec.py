"""Sweep definitions: one TOML file per published table under sweeps/, holding the document's
settings (base), the axes (grid), smaller scales, and the published figures the report sets beside
ours. A file may extend another of its folder and hold only what differs (`extends = "resnet"`,
harness/specs/extends.py). This module reads a file and expands it into cells; it runs nothing."""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, field_validator, model_validator

import experiments
from experiments import check_keys, make_config
from harness.specs import checkkinds, extends, specfile
from harness.machine import hardware
from harness.specs.cell_spec import Cell
from harness.errors import UserError
from harness.folders import SWEEPS_DIR, project_path
from harness.specs.specfile import SCALES, SpecFile
from harness.suggest import did_you_mean

__all__ = ["Cell", "SCALES", "SWEEPS_DIR", "SweepSpec", "available", "expand", "load"]


class SweepSpec(SpecFile):
    kind: ClassVar[str] = "sweep"
    derived: ClassVar[tuple[str, ...]] = ("path", "scale_grids", "scale_repeats")
    grid: dict[str, list] = {}
    # Repeats of every grid point, run in rounds (A B C, A B C). A scale may set its own
    # (`[scales.smoke] repeats = 1`), which wins over this. The shipped training sweeps say 3, and 1 at
    # smoke: one timing on a shared machine moves 10-25% between fresh processes, and smoke checks the
    # machinery, not the figures.
    repeats: int = Field(1, ge=1)
    # One line for the README's sweeps table (harness/report/docs_tables.py, `make docs`): what the grid
    # varies and what is read, with what the title leaves out (the ranges, "GPU only").
    measures: str = ""
    report: dict[str, Any] = {}
    published: dict[str, Any] = {}
    # Claims the report judges (harness/specs/checkkinds.py): a mistyped one stops the sweep before it runs.
    checks: list[Annotated[checkkinds.Check, BeforeValidator(checkkinds.parse)]] = []
    # A scale may replace grid axes (`[scales.smoke.grid]`): the shapes that fit a small machine.
    scale_grids: dict[str, dict[str, list]] = {}
    scale_repeats: dict[str, int] = {}
    # MLflow's system metrics (CPU, memory, GPU use) sampled in every cell; unset: on where a CUDA
    # GPU is present. `harness sweep --system-metrics / --no-system-metrics` overrides it.
    system_metrics: bool | None = None

    def system_metrics_on(self) -> bool:
        # On where a CUDA GPU is present (whether it was busy is then the question), off elsewhere.
        return hardware.gpu_count() > 0 if self.system_metrics is None else self.system_metrics

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
        for name, scale in self.scales.items():
            if "repeats" in scale:   # not a config field: kept apart, so the cells never see it
                count = scale.pop("repeats")
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(f"[scales.{name}] repeats must be a whole number of at least 1")
                self.scale_repeats[name] = count
        return self

    def repeats_at(self, scale: str) -> int:
        """How many times each grid point runs at a scale: the scale's own `repeats`, else the file's."""
        return self.scale_repeats.get(scale, self.repeats)

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
    spec = specfile.build(_with_parent(path), path, SweepSpec)
    spec.title = spec.title or spec.name
    spec.check_fields()
    for grid in (spec.grid, *spec.scale_grids.values()):
        keys = [k for axis, values in grid.items() for k in (_compound_keys(values) or [axis])]
        spec.check_read(keys)  # an unknown key too, named with the file
    _check_name_is_its_own(spec)
    _check_rows_exist(spec)
    _check_assumed_settings(spec)
    return spec


def _with_parent(path: Path) -> dict[str, Any]:
    """The file's keys, with what it inherits from the sweep file it extends (harness/specs/extends.py);
    a mistake in how it extends is one sentence naming the file."""
    raw = specfile.read_toml(path, "sweep")
    shown = project_path(path)
    try:
        parent = extends.parent_of(raw, path)
        if parent is None:
            return raw
        if not parent.is_file():
            others = [p.stem for p in path.parent.glob("*.toml") if p != path and not p.stem.startswith("study_")]
            raise extends.Refused(f"it extends '{raw[extends.KEY]}', but there is no {parent.name} beside it; "
                                  f"{did_you_mean(raw[extends.KEY], others)}choose one of {', '.join(sorted(others))}")
        return extends.merge(specfile.read_toml(parent, "sweep"), raw, project_path(parent))
    except extends.Refused as err:
        raise UserError(f"sweep file {shown}: {err}.") from None


def _check_name_is_its_own(spec: SweepSpec) -> None:
    """Two files claiming one sweep name would write their cells into one MLflow experiment, and
    the report would take one file's cells for the other's rows: refused."""
    folders = dict.fromkeys(p.resolve() for p in (SWEEPS_DIR, spec.path.parent))
    for folder in folders:
        for other, name in _sweep_names(folder):
            if name == spec.name and other.resolve() != spec.path.resolve():
                raise UserError(f"sweep name '{spec.name}' is claimed by both {spec.path} and {other}; "
                                "give one of them another name (each sweep is one MLflow experiment).")


def _sweep_names(folder: Path) -> tuple[tuple[Path, str | None], ...]:
    """(file, the name it claims) for each sweep file in the folder. Read once per version of the
    files: `harness list` and `harness reproduce` load every sweep, and each load asks this of the
    same folder (read afresh each time, that was most of their seconds)."""
    versions = []
    for path in sorted(folder.glob("*.toml")):
        if path.stem.startswith("study_"):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue   # that file's own mistakes are told when it is loaded
        versions.append((path, stat.st_mtime_ns, stat.st_size))
    return _claimed_names(tuple(versions))


@functools.lru_cache(maxsize=8)
def _claimed_names(versions: tuple[tuple[Path, int, int], ...]) -> tuple[tuple[Path, str | None], ...]:
    import tomllib

    names = []
    for path, _, _ in versions:
        try:
            names.append((path, tomllib.loads(path.read_text(encoding="utf-8")).get("name")))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue   # that file's own mistakes are told when it is loaded
    return tuple(names)


def _check_rows_exist(spec: SweepSpec) -> None:
    """Every check's `where`, `against` and `row` names an axis and values some grid point (at some
    scale) or published row has: one that matches nothing would be N/A for ever."""
    known: dict[str, set] = {}
    for grid in (spec.grid, *spec.scale_grids.values(),
                 *({k: v if isinstance(v, list) else [v] for k, v in spec.scale_values(s).items()
                    if k in spec.grid} for s in spec.scales)):
        for axis, values in grid.items():
            for value in values:
                for key, item in (value.items() if isinstance(value, dict) else [(axis, value)]):
                    known.setdefault(key, set()).add(_comparable(item))
    for row in spec.published.get("rows", []):
        for key, value in row.items():
            if key in known:
                known[key].add(_comparable(value))
    for check in spec.checks:
        for part, rows in check.row_sets().items():
            for key, wanted in rows.items():
                values = wanted if isinstance(wanted, list) else [wanted]
                missing = [v for v in values if key not in known or _comparable(v) not in known[key]]
                if missing:
                    raise UserError(f"sweep file {spec.shown}: the check '{check.name}' has {part} {key} = {missing[0]!r}, "
                                    f"which no grid point or published row has"
                                    + (f" (its values: {', '.join(map(str, sorted(known[key], key=str)))})."
                                       if key in known else f" ({key} is no axis of the sweep)."))


def _check_assumed_settings(spec: SweepSpec) -> None:
    """Every setting a check `assumes` is a field its experiment reads, and every stand-in is for one
    of them: a misspelt setting is never among a cell's params, so the check would be judged on
    whatever the cells ran, and a stand-in for a setting the claim does not assume labels nothing."""
    for check in spec.checks:
        where = f"sweep file {spec.shown}, check '{check.name}'"
        assumed, standing = list(check.assumes or {}), list(check.stand_ins or {})
        if assumed or standing:
            experiments.check_reads(spec.experiment, assumed + standing, where=where)
        loose = [k for k in standing if k not in assumed]
        if loose:
            raise UserError(f"{where}: stand_ins names {loose[0]}, which its assumes does not: a stand-in "
                            f"stands in for an assumed setting (add {loose[0]} to assumes, or drop it).")


def _comparable(value):
    """A value as rows compare it: 1 and 1.0 alike."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def expand(spec: SweepSpec, scale: str = "full", overrides: dict[str, Any] | None = None,
           repeats: int | None = None) -> list[Cell]:
    """Every cell of the grid at a scale, in rounds: every grid point once (repeat 0), then every
    point again (repeat 1), ..., so that a machine drifting during the sweep moves every point alike
    and a resumed sweep resumes by round. A scale's value for a grid axis, and then an override of
    it, replaces that axis (a list becomes the axis, a single value pins it); any other override
    applies to every cell. `repeats` replaces the scale's count (--until-decided adds rounds)."""
    overrides = dict(overrides or {})
    rounds = repeats or spec.repeats_at(scale)
    grid, compound, fixed = _grid_at(spec, scale, overrides)
    make_config(fixed)  # a bad value shared by every cell fails the whole sweep, before anything runs

    cells = []
    axes = list(grid)
    # Repeat 0 leaves `repeat` at its default, so its cell id is the one-repeat sweep's: raising
    # the repeats reuses the cells already measured and only adds rounds. Round r trains with seed
    # base + r, the same seed for every row of the round: the repeats of a row are then draws over
    # seeds (its accuracy gets an interval), while the rows of one round still differ only in
    # their settings (the speed-ups stay paired by round).
    for repeat in range(rounds):
        for combo in itertools.product(*(grid[a] for a in axes)):
            values = dict(fixed)
            for axis, value in zip(axes, combo):
                values.update(value if axis in compound.values() else {axis: value})
            if repeat:
                values["repeat"] = repeat
                values["seed"] = round_seed(values.get("seed", 0), repeat)
            label = " ".join(_label(a, v) for a, v in zip(axes, combo)) or spec.name
            if rounds > 1:
                label += f" r{repeat}"
            cells.append(Cell.build(values, label))
    _check_every_cell(spec, cells, overrides)
    if not cells:  # an empty axis from a scale or a file: nothing would run, yet a parent run would say done
        raise UserError(f"sweep {spec.name} at scale {scale} has no cell to run; every grid axis needs a value.")
    experiment = experiments.get(spec.experiment)
    for model in dict.fromkeys(getattr(c.config, "model", None) for c in cells if c.config is not None):
        experiment.check_model(model, where=f"sweep {spec.name}")
    return cells


def round_seed(base, repeat: int):
    """The seed round `repeat` trains with: the cell's own seed (its base) plus the round. A seed
    that is no whole number is left for the config to refuse, with its sentence."""
    try:
        return int(base) + repeat
    except (TypeError, ValueError):
        return base


def cell_count(spec: SweepSpec, scale: str = "full", overrides: dict[str, Any] | None = None) -> int:
    """How many cells expand() would build, counted without building them: a 100,000-cell grid
    from a typo is refused by --max-cells in a moment, not after building and validating every config."""
    grid, _, _ = _grid_at(spec, scale, overrides)
    return spec.repeats_at(scale) * math.prod(len(values) for values in grid.values())


def _grid_at(spec: SweepSpec, scale: str, overrides: dict[str, Any] | None) -> tuple[dict, dict, dict]:
    """The grid's axes at a scale with the overrides applied, the compound axes' fields (field ->
    axis), and the values every cell shares."""
    overrides = dict(overrides or {})
    check_keys(overrides, read_by=spec.experiment)
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
                            f"'{compound[key]}' of {spec.shown}; edit that axis in the sweep file instead.")
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
    return grid, compound, fixed


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
