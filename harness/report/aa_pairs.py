"""Free A/A pairs: cells with the same configuration measured by more than one table (T9.1's 2 threads
and T9.2's 1 x 2 gloo cell; the one ResNet cell of four D12.6 tables). Nothing differs between them
but when they ran, so how far apart their times are is the noise a verdict between two rows of one
table faces, measured at no cost beside the noise floor `make bench-noise` measures on purpose.

A pair is read from the cells the tables hold, by cell id (the configuration and the measurement
procedure, harness/fields/config.py) less the round, on one machine (fingerprint)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.report.intervals import median
from harness.store.tracking import CELL_ID


@dataclass
class Pair:
    tables: list[str]            # the tables that hold the cell, as the page names them
    medians: list[float]         # each table's median time of it, in the same order
    rounds: list[int]            # how many rounds each table's median is over
    metric: str
    where: list[str]             # each table's grid point of it

    @property
    def spread(self) -> float:
        """(largest - smallest) / smallest of the tables' medians."""
        return max(self.medians) / min(self.medians) - 1


def find(reports: list, name_of) -> list[Pair]:
    """The configurations that more than one table measured on one machine, with each table's median
    of the first table's time metric. `name_of(spec)` names a table as the page does."""
    seen: dict[tuple[str, str], dict[str, tuple]] = {}
    for r in reports:
        axes, time = r.spec.axes(), r.spec.report.get("time", "train_time_s")
        for run in r.runs:
            key = (r.fingerprint, _config_key(run))
            if key[1] is None:
                continue
            found = seen.setdefault(key, {})
            entry = found.setdefault(name_of(r.spec), (time, [], " ".join(f"{a}={run.params.get(a)}" for a in axes)))
            entry[1].append(run)
    pairs = []
    for found in seen.values():
        if len(found) < 2:
            continue
        metric = next(iter(found.values()))[0]
        times = {name: [run.metrics.get(metric) for run in runs] for name, (_, runs, _) in found.items()}
        times = {name: [v for v in values if v is not None] for name, values in times.items()}
        if sum(bool(v) for v in times.values()) < 2:
            continue
        names = [n for n in found if times[n]]
        pairs.append(Pair(names, [median(times[n]) for n in names], [len(times[n]) for n in names], metric,
                          [found[n][2] for n in names]))
    return pairs


def _config_key(run) -> str | None:
    """The cell's configuration without its round: the params but `repeat` and `seed` (both move
    with the round), or None for a cell that logged no cell id (not a grid cell)."""
    if CELL_ID not in run.tags:
        return None
    return repr(sorted((k, v) for k, v in run.params.items() if k not in ("repeat", "seed")))


def lines(reports: list, name_of, time_text) -> list[str]:
    """The page's lines: each pair with its tables' medians and how far apart they are."""
    found = find(reports, name_of)
    if not found:
        return ["- No configuration was measured by two tables here."]
    out = []
    for pair in found:
        shown = "; ".join(f"{name} ({where}): {time_text(pair.metric, m)} s over {n} round(s)"
                          for name, where, m, n in zip(pair.tables, pair.where, pair.medians, pair.rounds))
        out.append(f"- {pair.metric} of one configuration in {len(pair.tables)} tables: {shown}; "
                   f"{pair.spread:.1%} apart.")
    return out
