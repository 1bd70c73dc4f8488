"""Cells timed while other work held the machine's cores (the load probe, harness/machine/machine_load.py,
logs `contended` = 1 on them) in a sweep's table: their times measure the contention, not the setting.

A grid point with uncontended repeats is figured from those alone, its contended repeats left out
and counted in its note. A grid point whose every repeat was contended keeps its row, marked
contended, but its times are left out of the speed-ups (its own, and those it is the baseline of)
and of every timing check, which names the rows it left out. Contention slows a cell; it does not
change what the cell computes, so its parameter count and accuracy are kept.
`harness sweep NAME --remeasure-contended` measures such cells again.
"""

from __future__ import annotations

import pandas as pd

# CONTENDED: a cell's metric, and a table row's column: 1 when every repeat of the row was contended
from harness.machine.machine_load import CONTENDED
LEFT_OUT = "contended_left_out"     # a row's contended repeats left out (it had uncontended ones)
BASELINES = "contended_baselines"   # table.attrs: the baseline points whose speed-ups were left out


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
    blanked: what the speed-ups and the checks' intervals are formed from."""
    if CONTENDED not in cells or not (cells[CONTENDED] == 1).any():
        return cells
    blanked = cells.copy()
    blanked.loc[blanked[CONTENDED] == 1, [t for t in timings if t in blanked]] = float("nan")
    return blanked


def mark(table: pd.DataFrame, cells: pd.DataFrame, axes: list[str], left_out: dict[tuple, int],
         baseline_rows: dict, sweep: str) -> None:
    """The rows' `contended` and `contended_left_out` columns and their notes (only when some cell
    was contended: an uncontended table is unchanged), and the contended baselines in table.attrs."""
    if CONTENDED not in cells or not ((cells[CONTENDED] == 1).any() or left_out):
        return
    every = cells.groupby(axes, sort=False)[CONTENDED].agg(lambda c: float((c == 1).all()))
    keys = [_key(tuple(row)) for row in table[axes].itertuples(index=False)]
    table[CONTENDED] = [every.get(k if len(axes) > 1 else k[0], 0.0) for k in keys]
    table[LEFT_OUT] = [float(left_out.get(k, 0)) for k in keys]
    if "note" not in table:
        table["note"] = ""
    notes = table["note"].fillna("").astype(str).tolist()
    remeasure = f"`harness sweep {sweep} --remeasure-contended` measures it again"
    for i, key in enumerate(keys):
        if table.at[table.index[i], CONTENDED] == 1:
            notes[i] = _join(notes[i], "contended: its times are left out of speed-ups and checks; " + remeasure)
        elif left_out.get(key):
            notes[i] = _join(notes[i], f"{left_out[key]} repeat(s) timed while other work held the cores left out "
                                       "(its figures are the other repeats')")
    contended_bases = []
    for i, base in baseline_rows.items():
        if base != i and table.at[base, CONTENDED] == 1:
            where = " ".join(f"{a}={table.at[base, a]}" for a in axes)
            notes[table.index.get_loc(i)] = _join(notes[table.index.get_loc(i)],
                                                  f"speed-up left out: its baseline ({where}) was contended")
            contended_bases.append({a: table.at[base, a] for a in axes})
    table["note"] = notes
    table.attrs[BASELINES] = [dict(t) for t in dict.fromkeys(tuple(b.items()) for b in contended_bases)]


def for_check(table: pd.DataFrame, metric: str, read: pd.DataFrame, axes: list[str],
              derived: bool) -> tuple[pd.DataFrame, str]:
    """A timing check's table with the contended rows' figures blanked, and what it left out in
    words ("" when nothing): the contended rows among those the check reads (`read`) and, for a
    figure derived from a baseline (`derived`: a speed-up, an efficiency), the contended baselines."""
    from harness.report.intervals import bounds

    if CONTENDED not in table or not (table[CONTENDED] == 1).any():
        return table, ""
    contended = table[CONTENDED] == 1
    copy = table.copy()
    copy.loc[contended, [c for c in (metric, *bounds(metric)) if c in copy]] = float("nan")
    named = [" ".join(f"{a}={row[a]}" for a in axes) for _, row in read[read[CONTENDED] == 1].iterrows()]
    if derived:
        named += [" ".join(f"{a}={v}" for a, v in base.items()) + " (the baseline)"
                  for base in table.attrs.get(BASELINES, [])]
    named = list(dict.fromkeys(named))
    return copy, (f"left out: {', '.join(named)}, timed while other work held the cores (contended)"
                  if named else "")


def _key(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _join(note: str, text: str) -> str:
    return f"{note}; {text}" if note else text
