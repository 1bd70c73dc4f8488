"""Cells timed while other work held the machine's cores (the load probe, harness/machine/machine_load.py,
logs `contended` = 1 on them) in a sweep's table: their times measure the contention as much as the setting.

A grid point with uncontended repeats is figured from those alone, its contended repeats left out
and counted. A grid point whose every repeat was contended keeps its row and its figures: its time,
and its speed-up (as every speed-up over a contended baseline), are shown marked "contended, not
judged", so a busy machine still gives a figure; but no timing check rests on them, and a check
names the rows it left out. Contention slows a cell; it does not change what the cell computes, so
its parameter count and accuracy are kept and judged. The table says so once, above it (render.py),
with the command that measures the cells again (`--remeasure-contended`, harness/rerun.py).
"""

from __future__ import annotations

import pandas as pd

# CONTENDED: a cell's metric, and a table row's column: 1 when every repeat of the row was contended
from harness.machine.machine_load import CONTENDED, OTHER_CORES
from harness.report.figure_kinds import is_timing
LEFT_OUT = "contended_left_out"     # a row's contended repeats left out (it had uncontended ones)
BASELINE = "contended_baseline"     # a row's column: 1 when its speed-up divides a contended baseline's time
BASELINES = "contended_baselines"   # table.attrs: the contended baseline points
DERIVED = ("speedup", "efficiency")  # the figures formed over a baseline row's time
NOT_JUDGED = "contended, not judged"  # how a figure resting on a contended time is marked


def flags(runs) -> list[float]:
    """Each cell's `contended` (1.0 or 0.0), for the cells' frame."""
    return [float(run.metrics.get(CONTENDED) == 1) for run in runs]


def without_contended_repeats(cells: pd.DataFrame, axes: list[str]) -> tuple[pd.DataFrame, dict[tuple, int]]:
    """The cells less the contended repeats of grid points that have uncontended ones, and how many
    each such point lost."""
    if CONTENDED not in cells or not (cells[CONTENDED] == 1).any():
        return cells, {}
    clean = cells.groupby(axes, sort=False)[CONTENDED].transform(lambda c: (c != 1).any())
    dropped = cells[(cells[CONTENDED] == 1) & clean]
    counts = {_key(k): len(g) for k, g in dropped.groupby(axes, sort=False)} if len(dropped) else {}
    return cells[~((cells[CONTENDED] == 1) & clean)].reset_index(drop=True), counts


def times_blanked(cells: pd.DataFrame, timings: list[str]) -> pd.DataFrame:
    """The cells with the timings of the contended ones (by now, grid points with no other repeat)
    blanked: what the checks' intervals and resampled tables are formed from."""
    if CONTENDED not in cells or not (cells[CONTENDED] == 1).any():
        return cells
    blanked = cells.copy()
    blanked.loc[blanked[CONTENDED] == 1, [t for t in timings if t in blanked]] = float("nan")
    return blanked


def mark(table: pd.DataFrame, cells: pd.DataFrame, axes: list[str], left_out: dict[tuple, int],
         baseline_rows: dict) -> None:
    """The rows' `contended`, `contended_left_out` and `contended_baseline` columns (only when some
    cell was contended: an uncontended table is unchanged), and the contended baselines in
    table.attrs. The rows' notes stay the sweep's own: the table says it once (render.py)."""
    if CONTENDED not in cells or not ((cells[CONTENDED] == 1).any() or left_out):
        return
    every = cells.groupby(axes, sort=False)[CONTENDED].agg(lambda c: float((c == 1).all()))
    keys = [_key(tuple(row)) for row in table[axes].itertuples(index=False)]
    table[CONTENDED] = [every.get(k if len(axes) > 1 else k[0], 0.0) for k in keys]
    table[LEFT_OUT] = [float(left_out.get(k, 0)) for k in keys]
    over_contended = [0.0] * len(table)
    contended_bases = []
    for i, base in baseline_rows.items():   # a row no cell finished ("not run") has no speed-up to mark
        if base != i and table.at[base, CONTENDED] == 1 and pd.notna(table.at[i, "repeats"]):
            over_contended[table.index.get_loc(i)] = 1.0
            contended_bases.append({a: table.at[base, a] for a in axes})
    table[BASELINE] = over_contended
    table.attrs[BASELINES] = [dict(t) for t in dict.fromkeys(tuple(b.items()) for b in contended_bases)]


def rests_on_contention(table: pd.DataFrame, column: str) -> pd.Series:
    """The rows whose figure in `column` rests on a time taken under contention: a timing of a
    contended row, and a speed-up or efficiency (or a bound of one) of a contended row or over a
    contended baseline. All False for a figure contention does not move (accuracy, parameters)."""
    none = pd.Series(False, index=table.index)
    bare = column.removesuffix("_lo").removesuffix("_hi")
    if CONTENDED not in table or column.startswith("book_") or not is_timing(bare, table):
        return none
    marked = table[CONTENDED] == 1
    if bare in DERIVED and BASELINE in table:
        marked |= table[BASELINE] == 1
    return marked


def for_check(table: pd.DataFrame, metric: str, read: pd.DataFrame, axes: list[str],
              derived: bool) -> tuple[pd.DataFrame, str]:
    """A timing check's table with the figures that rest on contention blanked, and what it left
    out in words ("" when nothing): the contended rows among those the check reads (`read`) and, for
    a figure derived from a baseline (`derived`: a speed-up, an efficiency), the contended baselines."""
    from harness.report.intervals import bounds

    if CONTENDED not in table or not (table[CONTENDED] == 1).any():
        return table, ""
    copy = table.copy()
    for column in (metric, *bounds(metric)):
        if column in copy:
            copy.loc[rests_on_contention(table, column), column] = float("nan")
    named = [" ".join(f"{a}={row[a]}" for a in axes) for _, row in read[read[CONTENDED] == 1].iterrows()]
    if derived:
        named += [" ".join(f"{a}={v}" for a, v in base.items()) + " (the baseline)"
                  for base in table.attrs.get(BASELINES, [])]
    named = list(dict.fromkeys(named))
    return copy, (f"left out: {', '.join(named)}, timed while other work held the cores (contended)"
                  if named else "")


def busy_cores(metrics: list[dict]) -> str:
    """The cores other work held around the cells, as a figure or a range ("1.3", "1.3-1.6")."""
    found = sorted(m[OTHER_CORES] for m in metrics if m.get(OTHER_CORES) is not None)
    if not found:
        return "some"
    low, high = f"{found[0]:.1f}", f"{found[-1]:.1f}"
    return low if low == high else f"{low}-{high}"


def _key(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)
