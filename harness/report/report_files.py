"""A sweep's report as files: <sweep>.md, .csv and .png in the reports folder (or another)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from harness.folders import REPORTS_DIR
from harness.report.plots import plot
from harness.report.tables import Report
from harness.store.paths import inside


class ReportFiles(NamedTuple):
    """One report's files, by what each is: the pages link the plot, writeback logs all three."""
    markdown: Path   # <sweep>.md
    table: Path      # <sweep>.csv
    plot: Path       # <sweep>.png


def write_files(report: Report, out_dir: Path = REPORTS_DIR, stem_suffix: str = "") -> ReportFiles:
    """Write <sweep>.md, .csv and .png into out_dir (report/writeback.py logs them to the parent run)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = inside(out_dir, f"{report.spec.name}{stem_suffix}")  # the name came from a file a user may share
    markdown, table = stem.with_suffix(".md"), stem.with_suffix(".csv")
    markdown.write_text(report.markdown)
    report.table.to_csv(table, index=False)
    return ReportFiles(markdown, table, plot(report, stem.with_suffix(".png")))
