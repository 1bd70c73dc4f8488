"""Everything the report puts back into the tracking store, and why. The report reads the store
(tables.build_all) and renders files and text (tables, render, overview); only this module writes:

- the report's files (table .md and .csv, plots) become artifacts of the sweep's parent run that
  holds the cells, so the experiment's description can show the plot and link the table;
- each finished cell gets the figures the report derives for its grid point (`speedup`,
  `efficiency`) as metrics, so the MLflow UI can chart and sort the cells by them;
- the experiment's description becomes the report, so the UI's experiment page opens on the table
  beside the published figures and its verdicts;
- the experiment gets a saved view of its newest cells (ui_view.py), the page `harness ui` links to:
  the runs table with the cells' grid values and figures as its columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from harness.report import tables, ui_view
from harness.store import Store

ARTIFACT_DIR = "report"   # the parent run's artifact folder the description links into
FIGURE_TOLERANCE = 1e-9   # a cell's figure is logged again only when the report's value moved


def attach_files(store: Store, report: tables.Report, paths: Iterable[Path]) -> None:
    """The report's files, as artifacts of the parent run holding its cells."""
    for path in paths:
        store.log_artifact(report.parent_run_id, path, ARTIFACT_DIR)


def log_cell_figures(store: Store, report: tables.Report) -> int:
    """Log `speedup` (and `efficiency`) onto each finished cell whose value is new or changed (the
    baseline was rerun); returns how many cells were written."""
    figures, changed = tables.cell_figures(report), 0
    for run in report.runs:
        new = {k: v for k, v in figures.get(run.run_id, {}).items()
               if k not in run.metrics or abs(run.metrics[k] - v) > FIGURE_TOLERANCE}
        if new:
            store.log_metrics(run.run_id, new)
            changed += 1
    return changed


def describe(store: Store, experiment_id: str, markdown: str) -> None:
    """The experiment's description (what the UI shows on the experiment's page)."""
    store.describe_experiment(experiment_id, markdown)


def describe_view(store: Store, experiment_id: str, report: tables.Report) -> None:
    """The saved view of the report's cells, which `harness ui` links to."""
    store.tag_experiment(experiment_id, *ui_view.view_tag(report))
