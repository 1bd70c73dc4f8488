"""A sweep's report as files: <sweep>.md, .csv and .png in the reports folder (or another)."""

from __future__ import annotations

from pathlib import Path

from harness.folders import REPORTS_DIR
from harness.report.plots import plot
from harness.report.tables import Report
from harness.store.paths import inside


def write_files(report: Report, out_dir: Path = REPORTS_DIR, stem_suffix: str = "") -> list[Path]:
    """Write <sweep>.md, .csv and .png into out_dir (report/writeback.py logs them to the parent run)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = inside(out_dir, f"{report.spec.name}{stem_suffix}")  # the name came from a file a user may share
    paths = [stem.with_suffix(".md"), stem.with_suffix(".csv")]
    paths[0].write_text(report.markdown)
    report.table.to_csv(paths[1], index=False)
    paths.append(plot(report, stem.with_suffix(".png")))
    return paths
