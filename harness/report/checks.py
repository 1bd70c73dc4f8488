"""Verdicts on a reproduced table, from checks written in its sweep file next to the published figures.

Three kinds, each judged on our table (never on absolute seconds across different hardware):

    [[checks]]                      # an exact fact
    kind = "exact"
    metric = "param_count"
    where = { sparsity = 0.5 }
    expected = 1059306

    [[checks]]                      # a trend: Spearman rank correlation of metric against x
    kind = "trend"
    metric = "train_time_s"
    x = "sparsity"
    direction = "decreasing"        # or "increasing"
    min_correlation = 0.8           # |rho| needed, in the stated direction

    [[checks]]                      # our ratio against the published ratio, per matching row
    kind = "ratio"
    metric = "speedup"              # compared with book_speedup
    tolerance = 0.25                # |ours / published - 1| allowed
    where = { sparsity = 0.5 }      # optional: only these rows

    [[checks]]                      # a bound on our own figure (numerics, shares)
    kind = "bound"
    metric = "max_abs_diff_vs_eager"
    max = 1e-5                      # and/or min = ...
    where = { execution = "script" }

Verdicts: PASS, FAIL, or N/A when the table lacks the cells a check needs (it says which).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

PASS, FAIL, NA = "PASS", "FAIL", "N/A"


@dataclass
class Verdict:
    check: str       # the check in words
    verdict: str     # PASS | FAIL | N/A
    detail: str      # what was measured


def evaluate(checks: list[dict], table: pd.DataFrame) -> list[Verdict]:
    return [_KINDS[c.get("kind", "")](c, table) if c.get("kind") in _KINDS else
            Verdict(str(c), NA, f"unknown check kind {c.get('kind')!r}; known: {', '.join(_KINDS)}")
            for c in checks]


def _rows(table: pd.DataFrame, where: dict | None) -> pd.DataFrame:
    rows = table
    for key, value in (where or {}).items():
        rows = rows[rows[key] == value] if key in rows else rows.iloc[0:0]
    return rows


def _where_text(where: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (where or {}).items()) or "every row"


def _exact(check: dict, table: pd.DataFrame) -> Verdict:
    metric, expected, where = check["metric"], check["expected"], check.get("where")
    name = check.get("text") or f"{metric} at {_where_text(where)} is exactly {expected:,}"
    values = _rows(table, where)[metric].dropna() if metric in table else pd.Series(dtype=float)
    if values.empty:
        return Verdict(name, NA, f"no finished cell at {_where_text(where)}")
    bad = [v for v in values if v != expected]
    return Verdict(name, FAIL if bad else PASS, f"measured {', '.join(f'{v:,.0f}' for v in values)}")


def _trend(check: dict, table: pd.DataFrame) -> Verdict:
    metric, x, direction = check["metric"], check["x"], check.get("direction", "decreasing")
    need = float(check.get("min_correlation", 0.8))
    rows = _rows(table, check.get("where"))
    name = check.get("text") or f"{metric} is {direction} in {x} (rank correlation >= {need:g})"
    if metric not in rows or x not in rows:
        return Verdict(name, NA, f"the table has no {metric if metric not in rows else x} column")
    points = rows[[x, metric]].dropna()
    if len(points) < 3:
        return Verdict(name, NA, f"{len(points)} finished points; a trend needs 3")
    rho = points[x].rank().corr(points[metric].rank())
    signed = -rho if direction == "decreasing" else rho
    return Verdict(name, PASS if signed >= need else FAIL, f"Spearman rho = {rho:+.2f} over {len(points)} points")


def _ratio(check: dict, table: pd.DataFrame) -> Verdict:
    metric, tolerance, where = check["metric"], float(check["tolerance"]), check.get("where")
    published = check.get("published", f"book_{metric}")
    name = check.get("text") or (f"{metric} within {tolerance:.0%} of the published one at {_where_text(where)}")
    rows = _rows(table, where)
    if metric not in rows or published not in rows:
        return Verdict(name, NA, f"the table has no {metric if metric not in rows else published} column")
    pairs = rows[[metric, published]].dropna()
    if pairs.empty:
        return Verdict(name, NA, "no row has both our figure and the published one")
    ratios = pairs[metric] / pairs[published]
    worst = (ratios - 1).abs().max()
    detail = "ours/published = " + ", ".join(f"{r:.2f}" for r in ratios)
    return Verdict(name, PASS if worst <= tolerance else FAIL, detail)


def _bound(check: dict, table: pd.DataFrame) -> Verdict:
    metric, where = check["metric"], check.get("where")
    low, high = check.get("min", float("-inf")), check.get("max", float("inf"))
    name = check.get("text") or f"{metric} within [{low:g}, {high:g}] at {_where_text(where)}"
    values = _rows(table, where)[metric].dropna() if metric in table else pd.Series(dtype=float)
    if values.empty:
        return Verdict(name, NA, f"no finished cell at {_where_text(where)}")
    inside = values.between(low, high)
    return Verdict(name, PASS if inside.all() else FAIL, "measured " + ", ".join(f"{v:.3g}" for v in values))


_KINDS = {"exact": _exact, "trend": _trend, "ratio": _ratio, "bound": _bound}
