"""One sweep as it is asked for: the file, the scale, the overrides, and the cells they expand to,
every cell's config validated. The command line builds it once and hands it on: the size check,
the data-folder check and the engine read the same cells (expanding a grid validates every cell's
config, which for a large grid is seconds; it was done three times before the first cell ran)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.fields.config import RunConfig
from harness.specs import sweep_spec
from harness.specs.cell_spec import Cell
from harness.specs.sweep_spec import SweepSpec


@dataclass(frozen=True)
class SweepJob:
    spec: SweepSpec
    scale: str
    overrides: dict[str, Any]     # the --set values (and --device's), as the cells and the workers get them
    cells: tuple[Cell, ...]       # the grid at the scale with the overrides, in rounds (sweep_spec.expand)
    repeats: int | None = None    # the rounds asked for in place of the scale's own (--until-decided)

    @classmethod
    def build(cls, spec: SweepSpec, scale: str = "full", overrides: dict[str, Any] | None = None,
              repeats: int | None = None) -> "SweepJob":
        """The grid expanded and validated: a value no cell can take is one sentence, raised here."""
        overrides = dict(overrides or {})
        return cls(spec, scale, overrides, tuple(sweep_spec.expand(spec, scale, overrides, repeats=repeats)), repeats)

    def with_overrides(self, overrides: dict[str, Any]) -> "SweepJob":
        """This job under other overrides, expanded again only when they differ: the thread count a
        launcher gives each of its workers is in every cell's id, so those are other cells."""
        return self if overrides == self.overrides else SweepJob.build(self.spec, self.scale, overrides, self.repeats)

    def with_repeats(self, repeats: int) -> "SweepJob":
        """This job with `repeats` rounds (the rounds already run keep their cell ids, so they are reused)."""
        return SweepJob.build(self.spec, self.scale, self.overrides, repeats)

    def configs(self) -> list[RunConfig]:
        """The cells' validated configs (build refuses a grid in which a cell has none)."""
        return [c.config for c in self.cells if c.config is not None]
