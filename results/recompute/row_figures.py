"""Each row of a table recomputed from its cells, the report's way (its Conventions): medians, IQR,
rounds and seeds, each cell's MFU, the accuracy's interval over seeds, the speed-up over the baseline
row with its interval over rounds (both the report's seeded bootstrap, so they come out exactly),
the efficiency, each interval cut where the figure physically stops, and the published figures;
then every column compared with the table's CSV."""
from __future__ import annotations

import math
import pathlib
import sys

try:
    import numpy as np
    import pandas as pd
    from scipy import stats
except ImportError:
    sys.exit("recompute needs numpy, scipy and pandas: run it with the project's .venv/bin/python")

from read_store import number, same

RESAMPLES, REPLICATES, SEED = 2000, 400, 20   # the report's bootstrap draws, resampled tables, seed


def t95(n: int) -> float:
    return float(stats.t.ppf(0.975, n - 1))


def ratio_of_medians(num: dict, den: dict) -> tuple[float, float, float]:
    """median(num) / median(den) over the rounds both ran (two or more: resampled together), with
    the 95% interval: the bootstrap's standard error of the log ratio times Student's t."""
    num = {k: v for k, v in num.items() if v is not None and not math.isnan(v)}
    den = {k: v for k, v in den.items() if v is not None and not math.isnan(v) and v != 0}
    if not num or not den:
        return math.nan, math.nan, math.nan
    shared = sorted(set(num) & set(den))
    paired = len(shared) >= 2
    if paired:
        num, den = {k: num[k] for k in shared}, {k: den[k] for k in shared}
    value = float(np.median(list(num.values()))) / float(np.median(list(den.values())))
    n = len(shared) if paired else min(len(num), len(den))
    if n < 2 or value <= 0:
        return value, math.nan, math.nan
    rng = np.random.default_rng(SEED)
    if paired:
        a, b = np.array([num[k] for k in shared]), np.array([den[k] for k in shared])
        pick = rng.integers(0, n, (RESAMPLES, n))
        draws = np.median(a[pick], axis=1) / np.median(b[pick], axis=1)
    else:
        a, b = np.array(list(num.values())), np.array(list(den.values()))
        draws = (np.median(a[rng.integers(0, len(a), (RESAMPLES, len(a)))], axis=1)
                 / np.median(b[rng.integers(0, len(b), (RESAMPLES, len(b)))], axis=1))
    spread = float(np.std(np.log(draws), ddof=1)) * t95(n)
    return value, value * math.exp(-spread), value * math.exp(spread)


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median of a row's values over its seeds, with the bootstrap's 95% interval."""
    found = np.array([v for v in values if not math.isnan(v)], dtype=float)
    if len(found) < 2:
        return (float(np.median(found)) if len(found) else math.nan), math.nan, math.nan
    value = float(np.median(found))
    rng = np.random.default_rng(SEED)
    draws = np.median(found[rng.integers(0, len(found), (RESAMPLES, len(found)))], axis=1)
    spread = float(np.std(draws, ddof=1)) * t95(len(found))
    return value, value - spread, value + spread


def is_time(metric: str) -> bool:
    return metric.endswith("_s") and "time" in metric


def is_timing(metric: str, time: str) -> bool:
    return metric in ("speedup", "efficiency", "samples_per_s", "mfu", time) or is_time(metric) or "_over_" in metric


def is_accuracy(metric: str) -> bool:
    return "accuracy" in metric and "to_accuracy" not in metric


def iqr_name(time: str) -> str:
    return "train_time_iqr_s" if time == "train_time_s" else f"{time.removesuffix('_s')}_iqr_s"


class Table:
    """One table recomputed from its cells, checked column by column against its CSV."""

    def __init__(self, folder: pathlib.Path, spec: dict, cells: list[dict], scale: str):
        self.spec, self.cells, self.scale = spec, cells, scale
        self.axes = spec["axes"]
        self.report = spec.get("report", {})
        self.time = self.report.get("time", "train_time_s")
        self.csv = pd.read_csv(folder / f"{spec['name']}.csv")
        self.checked = 0
        assert not any(c["metrics"].get("contended") == 1 for c in cells), (
            f"{spec['name']}: a cell was timed under contention; this reader does not leave such cells out")
        self.rounds = {}   # grid point -> {round: cell}
        for c in cells:
            point = tuple(number(c["params"].get(a)) for a in self.axes)
            self.rounds.setdefault(point, {})[int(number(c["params"].get("repeat", "0")) or 0)] = c

    def point(self, row) -> tuple:
        return tuple(row[a] for a in self.axes)

    def values(self, where: dict, metric: str) -> dict[int, float]:
        """The values of a metric by round, of the cells at the grid point(s) `where` names."""
        found = {}
        for key, cell in self.rounds.items():
            if all(_equal(key[self.axes.index(a)], v) for a, v in where.items()):
                found.update({r: c["metrics"][metric] for r, c in cell.items() if metric in c["metrics"]})
        return found

    def at(self, row) -> dict:
        return {a: row[a] for a in self.axes if a in self.csv}

    def check_figures(self) -> None:
        t = self.csv
        finished = {self.point(row) for _, row in t[t["repeats"].notna()].iterrows()}
        assert finished == set(self.rounds), f"{self.spec['name']}: the CSV's rows are not the store's grid points"
        metrics = {m for c in self.cells for m in c["metrics"]}
        special = {"repeats", "seeds", "speedup", "efficiency", "target_reached", iqr_name(self.time),
                   "paired_baseline_time_s", "paired_rounds", "contended", "contended_left_out"}
        for _, row in t.iterrows():
            point = self.point(row)
            if pd.isna(row.get("repeats")):
                continue
            found = self.rounds[point]
            self._same(row, "repeats", len(found))
            if "seeds" in t:
                self._same(row, "seeds", len({number(c["params"].get("seed", "0")) for c in found.values()}))
            times = [c["metrics"][self.time] for c in found.values() if self.time in c["metrics"]]
            if iqr_name(self.time) in t:
                q75, q25 = np.percentile(times, [75, 25]) if len(times) > 1 else (math.nan, 0)
                self._same(row, iqr_name(self.time), q75 - q25)
            for column in t.columns:
                if column in special or column in self.axes or column.startswith("book_") or column.endswith(("_lo", "_hi")) \
                        or column == iqr_name(self.time) or t[column].dtype == object or column not in metrics:
                    continue
                logged = [c["metrics"][column] for c in found.values() if column in c["metrics"]]
                self._same(row, column, float(np.median(logged)) if logged else math.nan)
            if "target_reached" in t:
                reached = [c["metrics"]["target_reached"] for c in found.values() if "target_reached" in c["metrics"]]
                self._same(row, "target_reached", max(reached) if reached else math.nan)
            for column in [c for c in t.columns if c.endswith("_lo") and is_accuracy(c.removesuffix("_lo"))]:
                metric = column.removesuffix("_lo")
                by_seed: dict = {}
                for c in found.values():
                    if metric in c["metrics"]:
                        by_seed.setdefault(number(c["params"].get("seed", "0")), []).append(c["metrics"][metric])
                seeds = sorted({number(c["params"].get("seed", "0")) for c in found.values()})
                if len(seeds) > 1:
                    _, lo, hi = median_interval([float(np.median(by_seed[s])) if s in by_seed else math.nan
                                                 for s in seeds])
                else:
                    lo = hi = math.nan
                self._same(row, column, max(lo, 0.0))
                self._same(row, f"{metric}_hi", min(hi, 1.0))
        self._check_mfu()
        self._check_speedups()
        self._check_published()

    def _same(self, row, column: str, value) -> None:
        assert same(row[column], value), (self.spec["name"], self.point(row), column, row[column], value)
        self.checked += 1

    def _check_mfu(self) -> None:
        """Each cell's MFU from what it was computed from: FLOPs a sample x samples / seconds / peak."""
        for cell in self.cells:
            m = cell["metrics"]
            if "mfu" in m and all(k in m for k in ("flops_per_sample", "mfu_samples", "mfu_time_s", "peak_tflops")):
                mfu = m["flops_per_sample"] * m["mfu_samples"] / m["mfu_time_s"] / (m["peak_tflops"] * 1e12)
                assert math.isclose(mfu, m["mfu"], rel_tol=1e-6), (self.spec["name"], cell["id"], mfu, m["mfu"])
                self.checked += 1

    def baseline_rows(self, frame: pd.DataFrame) -> dict:
        """Each row's baseline row: the first baseline row of its group of the axes the baseline does
        not name, else the first baseline row."""
        baseline = self.report.get("baseline")
        mask = pd.Series(True, index=frame.index)
        for key, value in baseline.items():
            mask &= frame[key] == value
        mask &= frame["repeats"].notna() if "repeats" in frame else True
        if not mask.any():
            return {}
        found = {i: frame.index[mask][0] for i in frame.index}
        others = [a for a in self.axes if a not in baseline and a in frame]
        for _, group in (frame.groupby(others, dropna=False) if others else []):
            base = group.index[mask[group.index]]
            if len(base):
                found.update({i: base[0] for i in group.index})
        return found

    def _check_speedups(self) -> None:
        t, baseline, workers = self.csv, self.report.get("baseline"), self.report.get("workers")
        if not baseline or "speedup" not in t:
            return
        # the baseline row is picked in the order the rows were grouped (axes ascending), as the report does
        grouped = t[t["repeats"].notna()].sort_values(self.axes, kind="stable")
        base_of = self.baseline_rows(grouped)
        for i, row in grouped.iterrows():
            base = base_of.get(i)
            mine = self.values(self.at(row), self.time)
            if base is None:
                value = lo = hi = math.nan
            elif base == i:
                value, lo, hi = 1.0, math.nan, math.nan
            else:
                theirs = self.values(self.at(t.loc[base]), self.time)
                value, lo, hi = ratio_of_medians(theirs, mine)
                shared = set(theirs) & set(mine)
                if len(shared) >= 2 and len(shared) < len(theirs):
                    self._same(row, "paired_baseline_time_s", float(np.median([theirs[k] for k in shared])))
            if workers:   # k times the baseline's workers cannot be more than k times as fast
                bound = row[workers] / baseline.get(workers, 1)
                lo, hi = (bound if x > bound else x for x in (lo, hi))
            self._same(row, "speedup", value)
            self._same(row, "speedup_lo", lo)
            self._same(row, "speedup_hi", hi)
            if workers:
                ratio = row[workers] / baseline.get(workers, 1)
                for suffix, x in (("", value), ("_lo", lo), ("_hi", hi)):
                    self._same(row, "efficiency" + suffix, x / ratio)

    def _check_published(self) -> None:
        """The book_* columns are the sweep file's published rows, row for row."""
        for published in self.spec.get("published", {}).get("rows", []):
            rows = self.csv
            for a in self.axes:
                if a in published:
                    rows = rows[rows[a].map(lambda v, want=published[a]: _equal(v, want))]
            assert len(rows) >= 1, (self.spec["name"], published)
            for _, row in rows.iterrows():
                for key, value in published.items():
                    if key not in self.axes:
                        self._same(row, f"book_{key}", value)

    def replicates(self) -> dict:
        """Each metric's column recomputed on 400 resamples of the rounds (the same rounds for every
        row), in the CSV's row order; with the speed-up and efficiency derived from the time."""
        rounds = sorted({int(number(c["params"].get("repeat", "0")) or 0) for c in self.cells})
        if len(rounds) < 2:
            return {}
        position = {r: j for j, r in enumerate(rounds)}
        pick = np.random.default_rng(SEED).integers(0, len(rounds), (REPLICATES, len(rounds)))
        keys = [self.at(row) for _, row in self.csv.iterrows()]
        found = {}
        for metric in {m for c in self.cells for m in c["metrics"]} & set(self.csv.columns):
            grid = np.full((len(keys), len(rounds)), np.nan)
            for i, key in enumerate(keys):
                for r, value in self.values(key, metric).items():
                    grid[i, position[r]] = value
            with np.errstate(all="ignore"), _quiet():
                found[metric] = np.nanmedian(grid[:, pick], axis=2).T
        baseline, workers = self.report.get("baseline"), self.report.get("workers")
        if baseline and self.time in found:
            base = self.baseline_rows(self.csv)
            if base:
                order = [base.get(i, i) for i in range(len(keys))]
                found["speedup"] = found[self.time][:, order] / found[self.time]
                if workers and workers in self.csv:
                    found["efficiency"] = found["speedup"] / (self.csv[workers] / baseline.get(workers, 1)).to_numpy(float)
        return found


def _equal(a, b) -> bool:
    """Two settings as the report matches them: 5, 5.0 and numpy's 5 are one value; text is text."""
    def numeric(x) -> bool:
        return isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))
    if numeric(a) and numeric(b):
        return float(a) == float(b)
    return str(a) == str(b)


class _quiet:
    """numpy's warning for a row without a value in the drawn rounds, which is expected."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)
