"""verdicts.csv beside REPRODUCTION.md: every check of every table on the page, one line each, with its
class (harness/report/evidence.py), whether it is the table's headline, and what the table was measured
on and when. The page of the folder above reads it to say which of its tables were measured again
(harness/report/reruns.py), results/README.md reads it for each table's newest verdict, and each
folder's recompute.py judges every line again from the store; none of them parses the Markdown."""

from __future__ import annotations

import csv
import datetime
from pathlib import Path

from harness.report import checks, evidence

NAME = "verdicts.csv"
COLUMNS = ("sweep", "table", "check", "class", "verdict", "stand_in", "label", "headline", "n", "scale", "procedure",
           "seeds", "cells", "dirty_cells", "fingerprint", "machine", "first_cell", "last_cell", "detail")


def rows(report, table_label: str) -> list[dict]:
    """One line per check of one table (a built report of harness/report/tables.py)."""
    from harness.report.tables import procedure_of

    headline = evidence.headline(report.verdicts)
    starts = sorted(run.start_time for run in report.runs if run.start_time)
    seeds = report.table["seeds"].max() if "seeds" in report.table else float("nan")
    shared = {"sweep": report.spec.name, "table": table_label, "scale": report.scale,
              "procedure": procedure_of(report.runs[0]) if report.runs else "",
              "seeds": "" if seeds != seeds else int(seeds), "cells": len(report.runs),
              "dirty_cells": dirty_cells(report.runs), "fingerprint": report.fingerprint,
              "machine": report.machine, "first_cell": _when(starts[0]) if starts else "",
              "last_cell": _when(starts[-1]) if starts else ""}
    found = []
    for check, v in zip(report.spec.checks, report.verdicts):
        found.append({**shared, "check": v.check, "class": evidence.of(v), "verdict": str(v.verdict),
                      "stand_in": int(v.stand_in), "label": v.label, "headline": int(v is headline),
                      "n": checks.evidence_n(check, report.table), "detail": v.detail})
    return found


def dirty_cells(runs) -> int:
    """The cells that ran from a working tree with uncommitted changes (their code is no commit's)."""
    return sum(run.tags.get("git.dirty") == "true" for run in runs)


def write(lines: list[dict], path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(lines)
    return path


def read(path: Path) -> list[dict]:
    with path.open(newline="") as found:
        return list(csv.DictReader(found))


def _when(ms: int) -> str:
    """A cell's start as the page prints it: UTC to the minute (so the newest of two is told apart)."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
