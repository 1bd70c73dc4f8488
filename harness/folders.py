"""Where the harness reads and writes on disk, named once. Imports nothing of the harness, so any
layer may use it.

The project's own folders are found from this file (the harness runs from its checkout); the
decoded-dataset and peak cache is per user, outside the checkout, and HARNESS_CACHE_DIR moves it
(the tests point it at a temporary folder), as HARNESS_STATE_DIR moves the checkout's small state and
HARNESS_REPORTS_DIR the reports written without --out."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SWEEPS_DIR = REPO_ROOT / "sweeps"       # the sweep and study files (*.toml)
# Generated reports, unless --out says otherwise; HARNESS_REPORTS_DIR moves them (the tests point it at a
# temporary folder, so a test run leaves no report in the checkout).
REPORTS_DIR = Path(os.environ.get("HARNESS_REPORTS_DIR", REPO_ROOT / "reports"))
RESULTS_DIR = REPO_ROOT / "results"     # committed results, each folder with its store (report/results_index.py)
TARGETS_DIR = RESULTS_DIR / "targets"   # studies' calibrated targets (studies/deciding/calibrated_target.py)
MLRUNS_DIR = REPO_ROOT / "mlruns"       # the default store, the shared database, Slurm logs
# What the harness remembers of this checkout between commands (the scale each sweep and study last
# ran at); HARNESS_STATE_DIR moves it (the tests point it at a temporary folder).
STATE_DIR = Path(os.environ.get("HARNESS_STATE_DIR", MLRUNS_DIR))
CACHE_DIR = Path(os.environ.get("HARNESS_CACHE_DIR", Path.home() / ".cache" / "torch-speed-harness"))


def project_path(path: str | Path | None) -> str:
    """A file of the project as a path from its root (sweeps/study_x.toml), wherever the command
    was run from; any other file as given. A message then names a project file the same, short way
    on every machine."""
    if path is None:
        return "(no file)"
    given = Path(path)
    try:
        return str(given.resolve().relative_to(REPO_ROOT)) if given.is_absolute() else str(given)
    except ValueError:
        return str(given)
