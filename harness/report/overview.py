"""What the MLflow UI shows of a sweep: the experiment's description is its report (our table beside
the published figures, the verdicts, the plot), and each finished cell carries the figures the report
derives for it (`speedup`, `efficiency`) as metrics, so the UI can chart and sort cells by them.

Refreshed after each sweep invocation (`harness sweep`) and by `harness report`: the reports are read
and derived (tables.build_all), rendered (report_files.write_files, plots.plot, `description` here), and
written back to the store by writeback, the sweep report's writer to MLflow, with the saved view of the
newest table's cells that `harness ui` links to (ui_view.py). The report's files are
artifacts of the sweep's parent run holding the newest cells, which the description links to.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import ui_links
from harness.errors import UserError
from harness.report import plots, report_files, tables, writeback
from harness.store import Store
from harness.specs.sweep_spec import SweepSpec

# The description's copy of the plot: MLflow crops (never scales) an image wider than the description,
# which is about 780 px wide with the UI's assistant panel open on a 1500 px window.
OVERVIEW_WIDTH_PX = 760


def refresh(store: Store, spec: SweepSpec, scale: str | None = None) -> list[tables.Report]:
    """After a sweep invocation: build the sweep's reports (one per machine), log their files to the
    parent run (not to reports/, which is `harness report`'s), log each cell's derived figures and set
    the experiment's description. A sweep without a finished cell gets a description saying why."""
    experiment_id = store.find_experiment(spec.name)
    if experiment_id is None:
        return []
    try:
        reports = tables.build_all(store, spec, scale)
    except UserError as err:
        writeback.describe(store, experiment_id, f"# {spec.title}\n\nNo table yet: {err}\n")
        return []
    with tempfile.TemporaryDirectory(prefix="harness-report-") as folder:
        publish(store, spec, experiment_id, reports, Path(folder))
    return reports


def publish(store: Store, spec: SweepSpec, experiment_id: str, reports: list[tables.Report],
            out_dir: Path, scale_in_name: bool = False) -> list[report_files.ReportFiles]:
    """Write each report (the first one under the sweep's name, the others with their fingerprint),
    log the files and the cells' figures and describe the experiment; returns each report's written
    paths. `scale_in_name`: <sweep>-<scale>.md, as a study's report is named, so that a sweep's
    reports at two scales sit side by side in reports/ (a results folder holds one scale, and keeps
    the plain names its REPRODUCTION.md links)."""
    written = []
    for i, report in enumerate(reports):
        suffix = (f"-{report.scale}" if scale_in_name else "") + ("" if i == 0 else _suffix(report, reports[0]))
        files = report_files.write_files(report, out_dir, stem_suffix=suffix)
        written.append(files)
        writeback.attach_files(store, report, files)
        writeback.log_cell_figures(store, report)
        with tempfile.TemporaryDirectory(prefix="harness-overview-") as folder:
            small = plots.plot(report, Path(folder) / f"{files.plot.stem}-overview.png", OVERVIEW_WIDTH_PX)
            writeback.attach_files(store, report, [small])
    writeback.describe(store, experiment_id, description(experiment_id, reports, written))
    if reports:
        writeback.describe_view(store, experiment_id, reports[0])
    return written


def _suffix(report: tables.Report, first: tables.Report) -> str:
    """A later report's file name: its fingerprint, and a slug of its fixed settings when they differ."""
    import hashlib
    import re

    suffix = f"-{report.fingerprint}" if report.fingerprint != first.fingerprint or not report.variant else ""
    if report.variant:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", report.variant)[:40].strip("_")
        suffix += f"-{slug}-{hashlib.sha1(report.variant.encode()).hexdigest()[:6]}"
    return suffix


def description(experiment_id: str, reports: list[tables.Report], written: list[report_files.ReportFiles]) -> str:
    """The experiment's overview: each report's Markdown (title, scale, machine, clock, table, verdicts,
    cells without a result) with its plot shown and linked from the parent run's artifacts."""
    parts = []
    for report, files in zip(reports, written):
        plot = f"{writeback.ARTIFACT_DIR}/{files.plot.name}"
        page = ui_links.run_artifact(experiment_id, report.parent_run_id, plot)
        image = (f"get-artifact?path={writeback.ARTIFACT_DIR}/{files.plot.stem}-overview.png"
                 f"&run_uuid={report.parent_run_id}")
        parts.append(report.markdown.rstrip() + "\n\n"
                     f"Plot: [{plot}]({page}) (an artifact of the sweep's parent run that holds these cells, with the table "
                     f"as .md and .csv)\n\n![{report.spec.title}]({image})\n")
    derived = [c for c in ("speedup", "efficiency") if any(c in r.table for r in reports)]
    parts.append("*Written by `harness sweep` and `harness report` from the cells in this store"
                 + (f"; each cell's {' and '.join(f'`{c}`' for c in derived)} metric is its row's figure above"
                    if derived else "") + ".*\n")
    return "\n---\n\n".join(parts)
