"""`harness sweep NAME --until-decided [--max-repeats K]`: after the sweep's rounds, add one round at a
time, only for the grid points of the checks still INCONCLUSIVE (and their baseline rows, so the
rounds stay paired), until every check is decided or the points have K repeats.

The stopping rule, as the sweep states it when it stops: stop at the first round after which no
check is INCONCLUSIVE, or when the undecided points have K repeats, or when a round runs no new cell
(or one fails). Each verdict is printed with the n it rests on. Deciding by looking after every round
is a sequential test: a check looked at k times has about k chances to come out decided by noise, so
a verdict reached at a larger n than the sweep's own repeats says so by its n.

The extra rounds run in this process: each is a `run_job` of the sweep's job (same file and
settings) with one more repeat, restricted to those points, so the rounds already measured are reused.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from harness.specs.cell_spec import Cell
from harness.specs.sweep_job import SweepJob
from harness.report import checks, tables
from harness.store import Outcome, Store
from harness.sweeps.sweep_engine import SweepResult, run_job

DEFAULT_MAX_REPEATS = 10


def undecided_points(report: tables.Report) -> list[dict[str, Any]]:
    """The grid points (axis -> value) the report's INCONCLUSIVE checks read."""
    spec, table = report.spec, report.table
    axes = [a for a in spec.axes() if a in table]
    found: list[dict[str, Any]] = []
    for check, verdict in zip(spec.checks, report.verdicts):
        if verdict.verdict != checks.Judgement.INCONCLUSIVE:
            continue
        parts = [rows for rows in check.row_sets().values() if rows] or [None]
        if check.metric in ("speedup", "efficiency") and spec.report.get("baseline"):
            parts.append(spec.report["baseline"])
        for part in parts:
            rows = checks.rows_where(table, part)
            for _, row in rows[rows["repeats"].notna()].iterrows():
                point = {a: row[a] for a in axes}
                if point not in found:
                    found.append(point)
    return found


def selecting(points: list[dict[str, Any]]) -> Callable[[Cell], bool]:
    def keep(cell: Cell) -> bool:
        return cell.config is not None and any(
            all(_same(getattr(cell.config, a, None), v) for a, v in point.items()) for point in points)
    return keep


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def run_until_decided(job: SweepJob, store: Store, *, max_repeats: int = DEFAULT_MAX_REPEATS,
                      db_url: str | None = None, show_progress: bool = True,
                      log: Callable[[str], None] = print) -> list[SweepResult]:
    """Rounds added to the sweep's job until the timing checks are decided or K repeats; returns each
    round's result."""
    spec, scale = job.spec, job.scale
    results = []
    while True:
        report = tables.build_all(store, spec, scale)[0]
        points = undecided_points(report)
        if not points:
            log(f"until-decided: every check of {spec.name} ({scale}) is decided; stopped by the rule "
                "'no check INCONCLUSIVE'")
            _state_verdicts(report, log)
            return results
        rows = pd.DataFrame(points).merge(report.table, on=list(points[0]), how="left")
        have = int(rows["repeats"].max())
        if have >= max_repeats:
            log(f"until-decided: {len(points)} grid point(s) still inconclusive after {have} repeats; stopped by "
                f"the rule '--max-repeats {max_repeats} reached': " + "; ".join(_label(p) for p in points))
            _state_verdicts(report, log)
            return results
        log(f"until-decided: round {have + 1} for {len(points)} grid point(s): " + "; ".join(_label(p) for p in points))
        result = run_job(job.with_repeats(have + 1), store, db_url=db_url, select=selecting(points),
                         show_progress=show_progress, log=log)
        results.append(result)
        if result.count(Outcome.FAILED) or result.count(Outcome.NOT_RUN) or not result.count(Outcome.OK):
            log("until-decided: stopped by the rule 'a round ran no new cell or some failed' (the summary says which)")
            _state_verdicts(tables.build_all(store, spec, scale)[0], log)
            return results


def _state_verdicts(report: tables.Report, log: Callable[[str], None]) -> None:
    """Each check's verdict at the stop, with the n it rests on (runs, or seeds for an accuracy)."""
    base = report.spec.repeats_at(report.scale)
    for check, verdict in zip(report.spec.checks, report.verdicts):
        n = checks.evidence_n(check, report.table)
        extra = f", after {n - base} added round(s): decided by looking after each" if n > base and \
            verdict.verdict in (checks.Judgement.PASS, checks.Judgement.FAIL) else ""
        log(f"  {verdict.label} at n = {n}{extra}: {verdict.check}")


def _label(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())
