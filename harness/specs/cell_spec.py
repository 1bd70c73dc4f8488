"""What one cell asks for: the values a sweep's grid point or a study's trial names, its readable
label, and the config those values validate to (or why they do not). The id a finished cell is found
by again comes from here (the config's `cell_id`), so the file models name cells without knowing how
a cell runs (harness/cells.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from experiments import make_config
from harness.errors import UserError
from harness.fields.config import RunConfig


@dataclass
class Cell:
    values: dict[str, Any]          # what the cell asks for, before validation
    label: str                      # readable run name, e.g. "sparsity=0.5"
    config: RunConfig | None = None
    error: str | None = None        # why the values are not a valid config

    @classmethod
    def build(cls, values: dict[str, Any], label: str) -> "Cell":
        """A cell whose values are validated now; invalid values are kept as the cell's error: a sweep
        refuses its grid for it before any run (specs.sweep_spec.expand), a study records the trial as failed."""
        cell = cls(values, label)
        try:
            cell.config = make_config(values)
        except UserError as err:
            cell.error = str(err)
        return cell

    @property
    def cell_id(self) -> str:
        if self.config is not None:
            return self.config.cell_id()
        return hashlib.sha1(json.dumps(self.values, sort_keys=True, default=str).encode()).hexdigest()[:16]


