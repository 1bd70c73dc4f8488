"""Recompute a results folder's tables, their intervals and their verdicts from its store, without the
harness: a reader's check that the committed store, not our code, holds every figure on the page.

    python3 results/cpu-2core/recompute.py      # each folder of tables has one; it runs this on itself

It needs numpy, scipy and pandas (the project's .venv/bin/python has them) and reads only:
- the folder's store/mlflow.db (read-only), its <sweep>.csv tables, verdicts.csv and REPRODUCTION.md;
- the sweep files in sweeps/ (each table's axes, baseline, published rows and checks).

For each table on the page, from the store alone, by the rules the page states in its Conventions:
- its cells: the sweep's finished cells of the newest measurement procedure, at the newest scale;
- each row (a grid point): the median of every metric over its rounds, the IQR of its time, its
  rounds and seeds, the MFU of each cell from what it was computed from; the accuracy's 95% interval
  over the seeds; the speed-up over the baseline row, a ratio of medians over the rounds both ran,
  with its 95% interval; the efficiency; each interval cut where the figure physically stops;
- every figure compared with the table's CSV (to 1e-9), and the published figures with the sweep file;
- every check in the sweep file judged again, with its class and whether it is the table's headline,
  compared with verdicts.csv and with the page's rows; the page's summary counts recounted.
The intervals are the bootstrap's (2,000 draws, or 400 resampled rounds, from seed 20, as the
Conventions say), so they come out exactly, not approximately. A JPEG quality ladder (jpeg-ladder/)
is checked run by run against the store, with its paired differences, bends and fitted line.
"""
from __future__ import annotations

import csv
import math
import pathlib
import sqlite3
import statistics
import sys
import tomllib

try:
    import numpy as np
    import pandas as pd
    from scipy import stats
except ImportError:
    sys.exit("recompute needs numpy, scipy and pandas: run it with the project's .venv/bin/python")

RESAMPLES, REPLICATES, SEED = 2000, 400, 20   # the report's bootstrap draws, resampled tables, seed
CHANCE, DECIDE = 0.10, 0.975                  # 10 classes; a resampled check decided at 97.5%
CLASSES = ("book timing", "measured claim", "stand-in", "consistency", "exact fact", "computed fact", "project goal")
PLURALS = ("book timings", "measured claims", "stand-ins", "consistency", "exact facts", "computed facts",
           "project goals")
VERDICTS = ("PASS", "FAIL", "DIFFERS: machine", "INCONCLUSIVE", "N/A")


def same(a, b) -> bool:
    """Two figures agree: both missing, or equal to 1e-9 (a CSV keeps 17 digits)."""
    a, b = _float(a), _float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _float(value) -> float:
    if value is None or value == "":
        return math.nan
    return float(value)


def number(text):
    """A param as the report reads it: True/False, an int, a float, else the text."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text) if "." in text or "e" in text else int(text)
    except (TypeError, ValueError):
        return text


# ---------------------------------------------------------------- the store

class Store:
    def __init__(self, folder: pathlib.Path):
        self.db = sqlite3.connect((folder / "store" / "mlflow.db").resolve().as_uri() + "?mode=ro", uri=True)

    def runs(self, sweep: str) -> list[dict]:
        """The live runs tagged with the sweep, newest first, each with its tags, params and metrics."""
        found = []
        query = ("select r.run_uuid, r.start_time from runs r join tags t on t.run_uuid = r.run_uuid "
                 "where t.key = 'harness.sweep' and t.value = ? and r.lifecycle_stage = 'active' "
                 "order by r.start_time desc")
        for run, start in self.db.execute(query, (sweep,)):
            found.append({"id": run, "start": start,
                          "tags": dict(self.db.execute("select key, value from tags where run_uuid = ?", (run,))),
                          "params": dict(self.db.execute("select key, value from params where run_uuid = ?", (run,))),
                          "metrics": dict(self.db.execute("select key, value from latest_metrics where run_uuid = ?",
                                                          (run,)))})
        return found


def table_cells(store: Store, sweep: str, fingerprint: str):
    """The cells the page's table of `sweep` is made of (its finished cells measured on `fingerprint`
    under its newest procedure, at the newest invocation's scale), the cells of that machine that
    did not finish, and the scale."""
    runs = store.runs(sweep)
    parents = [r for r in runs if "mlflow.parentRunId" not in r["tags"]]
    scale = parents[0]["tags"].get("harness.scale", "full")
    cells = [r for r in runs if "mlflow.parentRunId" in r["tags"] and r["tags"].get("harness.scale") == scale
             and r["tags"].get("fingerprint", "unknown") == fingerprint]
    procedure = lambda r: int(number(r["tags"].get("harness.procedure", "0")) or 0)
    newest = max(procedure(r) for r in cells if r["tags"].get("harness.outcome") == "ok")
    current = [r for r in cells if procedure(r) >= newest]
    ok = [r for r in current if r["tags"].get("harness.outcome") == "ok"]
    return ok, [r for r in current if r["tags"].get("harness.outcome") != "ok"], scale


# ---------------------------------------------------------------- the sweep file

def load_sweep(root: pathlib.Path, name: str) -> dict:
    spec = tomllib.loads((root / "sweeps" / f"{name}.toml").read_text())
    axes = []
    grids = [spec.get("grid", {})] + [s["grid"] for s in spec.get("scales", {}).values() if "grid" in s]
    for grid in grids:
        for axis, values in grid.items():
            compound = [k for v in values for k in v] if values and all(isinstance(v, dict) for v in values) else [axis]
            axes += [k for k in dict.fromkeys(compound) if k not in axes]
    spec["axes"] = axes
    return spec


def repeats_at(spec: dict, scale: str) -> int:
    return spec.get("scales", {}).get(scale, {}).get("repeats", spec.get("repeats", 1))


# ---------------------------------------------------------------- the figures of a row

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


# ---------------------------------------------------------------- the verdicts

def rows_where(t: pd.DataFrame, where: dict | None) -> pd.DataFrame:
    rows = t
    for key, value in (where or {}).items():
        if key not in rows:
            return rows.iloc[0:0]
        rows = rows[rows[key].isin(value)] if isinstance(value, list) else rows[rows[key] == value]
    return rows


class Judge:
    """The page's rules (its Conventions) for one table, written again."""

    def __init__(self, table: Table, facts: dict):
        self.t, self.table, self.facts = table.csv, table, facts
        self.axes = [a for a in table.axes if a in table.csv]
        self.time = table.time
        tested = [c["metrics"]["test_samples"] for c in table.cells if "test_samples" in c["metrics"]]
        self.test_samples = float(np.median(tested)) if tested else None
        self.replicates = table.replicates()
        self.settings: dict[str, set] = {}
        for c in table.cells:
            for k, v in c["params"].items():
                self.settings.setdefault(k, set()).add(v)

    # -- one check: (verdict, stand_in, n)
    def judge(self, check: dict) -> tuple[str, bool, int]:
        other, standing = self._assumed(check)
        if other:   # the cells ran settings the claim does not assume (another model): N/A
            return "N/A", False, self._n(check)
        verdict, side, early = self._here(check)
        stand_in = standing and verdict != "N/A"
        lacking = [] if early else self._lacks(check.get("needs", {}))
        if lacking:   # measured without what the claim needs: a stand-in whatever its verdict
            stand_in = True
            if verdict == "FAIL" and side == ("high" if is_time(check["metric"]) else "low"):
                verdict = "DIFFERS: machine"   # it missed on the side the missing resource predicts
        return verdict, stand_in, self._n(check)

    def _assumed(self, check: dict) -> tuple[bool, bool]:
        texts = lambda v: set() if v is None else {str(x).lower() if isinstance(x, bool) else str(x)
                                                  for x in (v if isinstance(v, list) else [v])}
        other = standing = False
        for key, want in (check.get("assumes") or {}).items():
            found = self.settings.get(key)
            if not found or found <= texts(want):
                continue
            if found <= texts(want) | texts((check.get("stand_ins") or {}).get(key)):
                standing = True
            else:
                other = True
        return other, standing

    def _lacks(self, needs: dict) -> list[str]:
        f, lacking = self.facts, []
        if needs.get("cores") is not None and f["cores"] is not None and f["cores"] < needs["cores"]:
            lacking.append("cores")
        if needs.get("gpus") is not None and f["gpus"] is not None and f["gpus"] < needs["gpus"]:
            lacking.append("gpus")
        native = needs.get("native")
        for dtype in [] if native is None else native if isinstance(native, list) else [native]:
            if (dtype in f["peak_ratio"] and f["peak_ratio"][dtype] < 1.0) or \
                    (dtype not in f["peak_ratio"] and dtype in f["emulated"]):
                lacking.append(dtype)
        backend = needs.get("backend")
        for name in [] if backend is None else backend if isinstance(backend, list) else [backend]:
            if name in f["missing_backends"]:
                lacking.append(name)
        return lacking

    def _here(self, check: dict) -> tuple[str, str, bool]:
        """(verdict, the side a FAIL missed on, whether it was N/A before judging anything)."""
        kind, metric = check["kind"], check["metric"]
        scale = self.table.scale
        if check.get("scales") and scale not in check["scales"]:
            return "N/A", "", True
        if scale == "smoke" and kind != "exact" and "smoke" not in check.get("scales", []):
            return "N/A", "", True
        if kind != "exact" and self._at_chance(check):
            return "N/A", "", True
        repeats = repeats_at(self.table.spec, scale)
        if repeats > 1 and is_timing(metric, self.time):
            return (*self._on_interval(check, self._fewest("repeats", check)), False)
        if is_accuracy(metric) and kind != "exact":
            return (*self._on_interval(check, self._fewest_seeds(check)), False)
        return (*self.point(check, self.t), False)

    def _n(self, check: dict) -> int:
        return self._fewest_seeds(check) if is_accuracy(check["metric"]) else self._fewest("repeats", check)

    def _picked(self, check: dict) -> pd.DataFrame:
        sets = [check[k] for k in ("where", "against", "row") if check.get(k) is not None]
        return pd.concat([rows_where(self.t, s) for s in sets]) if sets else self.t

    def _fewest(self, column: str, check: dict) -> int:
        if column not in self.t:
            return 0
        counts = self._picked(check)[column].dropna()
        return int(counts.min()) if len(counts) else 0

    def _fewest_seeds(self, check: dict) -> int:
        if "seeds" not in self.t:
            return 1 if self._fewest("repeats", check) else 0
        return self._fewest("seeds", check)

    def _ceiling(self, metric: str) -> float | None:
        if "accuracy" not in metric or not self.test_samples or metric not in self.t:
            return None
        return CHANCE + 3 * math.sqrt(CHANCE * (1 - CHANCE) / self.test_samples)

    def _at_chance(self, check: dict) -> bool:
        metric, ceiling = check["metric"], self._ceiling(check["metric"])
        if ceiling is None:
            return False
        if check["kind"] == "best":
            pair = self._stated_and_rival(check, self.t)
            if pair is None:
                return False
            if check["goal"] == "highest" and pair[0][metric] <= ceiling < pair[1][metric]:
                return True
            return max(pair[0][metric], pair[1][metric]) <= ceiling
        if check["kind"] == "trend":
            points = rows_where(self.t, check.get("where"))[[check["x"], metric]].dropna() \
                if check["x"] in self.t else self.t.iloc[0:0]
            learned = int((points[metric] > ceiling).sum())
            return not (len(points) < 3 or learned >= 3 or learned == len(points))
        values = rows_where(self.t, check["against"] if check["kind"] == "compare" else check.get("where"))[metric].dropna()
        return not (values.empty or (values > ceiling).any())

    # -- point verdicts: (verdict, side)
    def point(self, check: dict, t: pd.DataFrame) -> tuple[str, str]:
        return getattr(self, "_" + check["kind"])(check, t)

    def _exact(self, check, t):
        values = rows_where(t, check.get("where"))[check["metric"]].dropna() if check["metric"] in t else pd.Series(dtype=float)
        if values.empty:
            return "N/A", ""
        return ("FAIL" if any(v != check["expected"] for v in values) else "PASS"), ""

    def _trend(self, check, t):
        metric, x = check["metric"], check["x"]
        rows = rows_where(t, check.get("where"))
        if metric not in rows or x not in rows:
            return "N/A", ""
        points = rows[[x, metric]].dropna().copy()
        ceiling = self._ceiling(metric)
        if ceiling is not None:
            points[metric] = points[metric].where(points[metric] > ceiling, CHANCE)
        if len(points) < 3:
            return "N/A", ""
        if points[metric].nunique() == 1:
            return "FAIL", ""
        rho = points[x].rank().corr(points[metric].rank())
        signed = -rho if check.get("direction", "decreasing") == "decreasing" else rho
        return ("PASS" if signed >= float(check.get("min_correlation", 0.8)) else "FAIL"), ""

    def _range(self, check, published: pd.Series):
        tolerance = float(check["tolerance"])
        low, high = pd.Series(1 - tolerance, index=published.index), pd.Series(1 + tolerance, index=published.index)
        if check.get("max") is not None:
            high = high.where(high <= check["max"] / published, check["max"] / published)
        return low, high

    def _ratio(self, check, t):
        metric = check["metric"]
        published = check.get("published") or f"book_{metric}"
        rows = rows_where(t, check.get("where"))
        if metric not in rows or published not in rows:
            return "N/A", ""
        pairs = rows[[metric, published]].dropna()
        if pairs.empty:
            return "N/A", ""
        ratios = pairs[metric] / pairs[published]
        low, high = self._range(check, pairs[published])
        inside = (ratios >= low) & (ratios <= high)
        return ("PASS", "") if inside.all() else ("FAIL", "low" if (ratios < low).any() else "high")

    def _bound(self, check, t):
        metric, where = check["metric"], check.get("where")
        low, high = self._low_high(check)
        rows = rows_where(t, where)
        values = rows[metric].dropna() if metric in t else pd.Series(dtype=float)
        if values.empty:
            if self._never_reached(check, t):
                return "FAIL", "high"
            return "N/A", ""
        inside = values.between(low, high)
        return ("PASS", "") if inside.all() else ("FAIL", "low" if (values < low).any() else "high")

    def _low_high(self, check):
        low, high = (check.get("min"), check.get("max")) if check["kind"] == "bound" else \
            (check.get("min_ratio"), check.get("max_ratio"))
        return (-math.inf if low is None else low), (math.inf if high is None else high)

    def _never_reached(self, check, t) -> bool:
        if check["kind"] != "bound" or check["metric"] not in ("time_to_accuracy_s", "epochs_to_accuracy") \
                or self._low_high(check)[1] == math.inf:
            return False
        rows = rows_where(t, check.get("where"))
        finished = rows[rows["repeats"] > 0] if "repeats" in rows else rows.iloc[0:0]
        return (not finished.empty and "target_reached" in finished and (finished["target_reached"] == 0).all()
                and (check["metric"] not in finished or finished[check["metric"]].isna().all()))

    def _compare(self, check, t):
        metric, where, against = check["metric"], check["where"], check["against"]
        low, high = self._low_high(check)
        within = math.inf if check.get("within") is None else check["within"]
        if metric not in t:
            return "N/A", ""
        on = [a for a in self.axes if where.get(a) == against.get(a)]
        ours = rows_where(t, where)[on + [metric]].dropna(subset=[metric])
        theirs = rows_where(t, against)[on + [metric]].dropna(subset=[metric])
        pairs = ours.merge(theirs, on=on, suffixes=("", "_against")) if on else \
            ours.merge(theirs, how="cross", suffixes=("", "_against"))
        if pairs.empty:
            return "N/A", ""
        a, b = pairs[metric], pairs[f"{metric}_against"]
        ratio, diff = a / b, (a - b).abs()
        holds = ratio.between(low, high) & (diff <= within)
        if holds.all():
            return "PASS", ""
        return "FAIL", "low" if (ratio < low).any() or ((diff > within) & (a < b)).any() else "high"

    def _stated_and_rival(self, check, t):
        metric = check["metric"]
        rows = rows_where(t, check.get("where")).dropna(subset=[metric])
        stated = rows_where(rows, check["row"])
        if stated.empty or len(rows) < 2:
            return None
        others = rows.drop(stated.index)
        rival = others[metric].idxmin() if check["goal"] == "lowest" else others[metric].idxmax()
        return stated.iloc[0], others.loc[rival]

    def _best(self, check, t):
        if check["metric"] not in t:
            return "N/A", ""
        pair = self._stated_and_rival(check, t)
        if pair is None:
            return "N/A", ""
        stated, rival = pair
        metric = check["metric"]
        wins = stated[metric] < rival[metric] if check["goal"] == "lowest" else stated[metric] > rival[metric]
        return ("PASS" if wins else "FAIL"), ""

    def _flat(self, check, t):
        metric = check["metric"]
        values = rows_where(t, check.get("where"))[metric].dropna() if metric in t else pd.Series(dtype=float)
        if len(values) < 2:
            return "N/A", ""
        smallest, largest = values.min(), values.max()
        spread = (largest - smallest) / abs(smallest) if smallest else math.inf if largest else 0.0
        return ("PASS" if spread <= float(check["tolerance"]) else "FAIL"), ""

    # -- a verdict over repeats or seeds
    def _on_interval(self, check: dict, n: int) -> tuple[str, str]:
        verdict, side = self.point(check, self.t)
        if verdict == "N/A" or self._never_reached(check, self.t):
            return verdict, side
        if n < 2:
            return "INCONCLUSIVE", ""
        kind, metric = check["kind"], check["metric"]
        if kind in ("bound", "ratio") and f"{metric}_lo" in self.t:
            return self._interval(check)
        if kind == "compare" and check.get("within") is None:
            return self._compare_interval(check, side)
        return self._resampled(check, verdict, side)

    @staticmethod
    def _within(lo, hi, low, high) -> str:
        return "PASS" if lo >= low and hi <= high else "FAIL" if hi < low or lo > high else "INCONCLUSIVE"

    def _interval(self, check):
        metric = check["metric"]
        rows = rows_where(self.t, check.get("where"))
        if check["kind"] == "ratio":
            published = check.get("published") or f"book_{metric}"
            rows = rows.dropna(subset=[metric, published])
            scale = rows[published]
            lows, highs = self._range(check, scale)
        else:
            rows = rows.dropna(subset=[metric])
            scale = pd.Series(1.0, index=rows.index)
            low, high = self._low_high(check)
            lows, highs = pd.Series(low, index=rows.index), pd.Series(high, index=rows.index)
        states = []
        for i in rows.index:
            lo, hi = rows.at[i, f"{metric}_lo"] / scale[i], rows.at[i, f"{metric}_hi"] / scale[i]
            states.append("INCONCLUSIVE" if pd.isna(lo) or pd.isna(hi) else self._within(lo, hi, lows[i], highs[i]))
        if "FAIL" in states:
            return "FAIL", "low" if any(rows.at[i, f"{metric}_hi"] / scale[i] < lows[i] for i in rows.index) else "high"
        return ("PASS" if states and all(s == "PASS" for s in states) else "INCONCLUSIVE"), ""

    def _compare_interval(self, check, side):
        metric, where, against = check["metric"], check["where"], check["against"]
        low, high = self._low_high(check)
        on = [a for a in self.axes if where.get(a) == against.get(a)]
        states = []
        for i, row in rows_where(self.t, where).dropna(subset=[metric]).iterrows():
            shared = {a: row[a] for a in on}
            for j, other in rows_where(self.t, {**against, **shared}).dropna(subset=[metric]).iterrows():
                value, lo, hi = ratio_of_medians(self.table.values(self.table.at(row), metric),
                                                 self.table.values(self.table.at(other), metric))
                states.append("INCONCLUSIVE" if math.isnan(lo) or math.isnan(hi) else self._within(lo, hi, low, high))
        if not states:
            return self.point(check, self.t)
        if "FAIL" in states:
            return "FAIL", side or "high"
        return ("PASS" if all(s == "PASS" for s in states) else "INCONCLUSIVE"), ""

    def _resampled(self, check, verdict, side):
        draws = self.replicates.get(check["metric"])
        if draws is None:
            return "INCONCLUSIVE", ""
        passes = 0
        for draw in draws:
            copy = self.t.copy()
            copy[check["metric"]] = draw
            passes += self.point(check, copy)[0] == "PASS"
        share = passes / len(draws)
        if verdict == "PASS" and share >= DECIDE:
            return "PASS", ""
        if verdict == "FAIL" and share <= 1 - DECIDE:
            return "FAIL", side
        return "INCONCLUSIVE", ""


def facts_of(cells: list[dict], failed: list[dict]) -> dict:
    """What the cells were measured on (cores, GPUs, native dtypes, missing backends), from what they logged."""
    facts = {"cores": None, "gpus": None, "native": set(), "emulated": set(), "peak_ratio": {}, "missing_backends": {}}
    tags = cells[0]["tags"]
    if tags.get("cpu.cores", "").isdigit():
        facts["cores"] = int(tags["cpu.cores"])
    if tags.get("gpu.names") is not None:
        on_gpu = any(c["params"].get("device", "").startswith("cuda") for c in cells)
        facts["gpus"] = len([n for n in tags["gpu.names"].split(", ") if n and n != "none"]) if on_gpu else 0
    for c in cells:
        dtype, native = c["params"].get("dtype"), c["metrics"].get("dtype_native")
        if dtype is not None and native is not None:
            facts["native" if native else "emulated"].add(dtype)
    peaks: dict = {}
    for c in cells:
        dtype, peak = c["params"].get("dtype"), c["metrics"].get("peak_tflops")
        if dtype and peak:
            peaks.setdefault(dtype, []).append(peak / (c["metrics"].get("peak_devices") or 1))
    if "fp32" in peaks:   # native means a measured peak at least fp32's, whatever a flag says
        fp32 = sorted(peaks["fp32"])[len(peaks["fp32"]) // 2]
        for dtype, found in peaks.items():
            if dtype == "fp32":
                continue
            ratio = facts["peak_ratio"][dtype] = sorted(found)[len(found) // 2] / fp32
            slow = ratio < 1.0
            facts["emulated" if slow else "native"].add(dtype)
            facts["native" if slow else "emulated"].discard(dtype)
    if "bf16" not in facts["native"] | facts["emulated"] and tags.get("cpu.native_bf16") == "false" and facts["gpus"] == 0:
        facts["emulated"].add("bf16")
    for c in failed:
        backend, reason = c["params"].get("backend"), c["tags"].get("harness.reason", "")
        if c["tags"].get("harness.outcome") == "skipped" and backend and f"backend '{backend}'" in reason:
            facts["missing_backends"].setdefault(backend, reason)
    return facts


def class_of(check: dict, stand_in: bool) -> str:
    """The verdict's class, as the page's Conventions name them."""
    claim = check.get("claim", "published")
    if claim == "goal":
        return "project goal"
    if claim in ("consistency", "computed"):
        return "consistency" if claim == "consistency" else "computed fact"
    if check["kind"] == "exact":
        return "exact fact"
    if stand_in:
        return "stand-in"
    return "book timing" if is_timing(check["metric"], "") else "measured claim"


def headline(judged: list[tuple[str, str]]) -> int | None:
    """The index of the table's headline: its first document's claim judged here (any verdict but
    N/A), else its first judged consistency check, goal, computed fact or exact fact, else its first
    document's claim."""
    claims = ("book timing", "measured claim", "stand-in")
    for kinds in (claims, ("consistency",), ("project goal",), ("computed fact",), ("exact fact",)):
        found = [i for i, (verdict, klass) in enumerate(judged) if verdict != "N/A" and klass in kinds]
        if found:
            return found[0]
    found = [i for i, (_, klass) in enumerate(judged) if klass in claims]
    return found[0] if found else (0 if judged else None)


def count_line(judged: list[tuple[str, str]]) -> str:
    parts = []
    for klass, plural in zip(CLASSES, PLURALS):
        counts = [(v, sum(1 for verdict, k in judged if k == klass and verdict == v)) for v in VERDICTS[:4]]
        counts = [f"{n} {'inconclusive' if v == 'INCONCLUSIVE' else v}" for v, n in counts if n]
        if counts:
            parts.append(f"{plural} " + ", ".join(counts))
    na = sum(1 for verdict, _ in judged if verdict == "N/A")
    return "; ".join(parts + [f"{na} N/A"] * bool(na)) or "none"


# ---------------------------------------------------------------- a folder

def check_folder(folder: pathlib.Path) -> int:
    root = next(p for p in folder.resolve().parents if (p / "sweeps").is_dir())
    store = Store(folder)
    page = (folder / "REPRODUCTION.md").read_text()
    lines = list(csv.DictReader(open(folder / "verdicts.csv")))
    checked, judged_all = 0, []
    for sweep in dict.fromkeys(line["sweep"] for line in lines):
        mine = [line for line in lines if line["sweep"] == sweep]
        fingerprints = {line["fingerprint"] for line in mine}
        assert len(fingerprints) == 1, f"{sweep}: tables of {len(fingerprints)} machines; this reader takes one"
        spec = load_sweep(root, sweep)
        cells, failed, scale = table_cells(store, sweep, fingerprints.pop())
        table = Table(folder, spec, cells, scale)
        table.check_figures()
        judge = Judge(table, facts_of(cells, failed))
        judged = []
        for check, line in zip(spec.get("checks", []), mine, strict=True):
            verdict, stand_in, n = judge.judge(check)
            klass = class_of(check, stand_in)
            label = f"{verdict} (stand-in)" if stand_in and verdict != "DIFFERS: machine" else verdict
            found = (line["check"], line["verdict"], line["stand_in"], line["class"], line["n"])
            assert found == (check.get("text") or f"{check['kind']} check of {check['metric']}", verdict,
                             str(int(stand_in)), klass, str(n)), (sweep, found, (verdict, stand_in, klass, n))
            assert f"| {line['check']} | **{label}** |" in page, (sweep, line["check"], label)
            judged.append((verdict, klass))
        top = headline(judged)
        assert [line["headline"] for line in mine] == ["1" if i == top else "0" for i in range(len(mine))], sweep
        judged_all += judged
        print(f"== {sweep}: {len(cells)} cells, {table.checked} figures as the CSV's; checks: {count_line(judged)}")
        checked += table.checked + len(judged)
    summary = count_line(judged_all)
    assert f"; checks: {summary}.**" in page, summary
    print(f"the page's counts: {summary}")
    return checked + check_ladder(folder, store)


def check_ladder(folder: pathlib.Path, store: Store) -> int:
    """A JPEG quality ladder beside the tables: each run against the store, and its README's paired
    differences, the bend of each middle rung and the fitted line recomputed."""
    ladder = folder / "jpeg-ladder"
    if not (ladder / "ladder.csv").exists():
        return 0
    checked = 0
    runs = list(csv.DictReader(open(ladder / "ladder.csv")))
    readme = (ladder / "README.md").read_text()
    db = store.db
    print(f"== jpeg-ladder ({len(runs)} runs)")
    for run in runs:
        metrics = dict(db.execute("select key, value from latest_metrics where run_uuid=?", (run["mlflow_run_id"],)))
        params = dict(db.execute("select key, value from params where run_uuid=?", (run["mlflow_run_id"],)))
        sweep = db.execute("select value from tags where run_uuid=? and key='harness.sweep'", (run["mlflow_run_id"],)).fetchone()
        assert sweep[0] == run["experiment"], run
        assert int(params["seed"]) == int(run["seed"]) and params["dtype"] == run["dtype"], run
        for name in ("test_accuracy", "test_accuracy_no_tta", "train_time_s"):
            assert same(metrics[name], run[name]), (run, name)
            checked += 1
    ladder_runs = [r for r in runs if r["fp32_pair"] == "False"]
    qualities = sorted({int(r["jpeg_quality"]) for r in ladder_runs}, reverse=True)
    by_seed = {q: {int(r["seed"]): float(r["test_accuracy"]) for r in ladder_runs if int(r["jpeg_quality"]) == q}
               for q in qualities}
    for q in qualities[1:]:
        shared = sorted(set(by_seed[q]) & set(by_seed[qualities[0]]))
        median = statistics.median(by_seed[q][s] - by_seed[qualities[0]][s] for s in shared)
        assert f"**{100 * median:+.2f} points**" in readme, (q, median)
        print(f"q{q} against q{qualities[0]}, paired by seed: median {100 * median:+.2f} points over {len(shared)} seeds")
        checked += 1
    by_bytes = sorted({(float(r["image_bytes_per_image"]), int(r["jpeg_quality"])) for r in ladder_runs})
    for (b_lo, q_lo), (b, q), (b_hi, q_hi) in zip(by_bytes, by_bytes[1:], by_bytes[2:]):
        w = (math.log(b) - math.log(b_lo)) / (math.log(b_hi) - math.log(b_lo))
        shared = sorted(set(by_seed[q_lo]) & set(by_seed[q]) & set(by_seed[q_hi]))
        median = statistics.median(by_seed[q][s] - (by_seed[q_lo][s] + w * (by_seed[q_hi][s] - by_seed[q_lo][s]))
                                   for s in shared)
        line = next(l for l in readme.splitlines() if l.startswith(f"- Quality {q} against the chord from {q_lo} to {q_hi}"))
        assert f"median **{100 * median:+.2f} points**" in line, (q, median, line)
        checked += 1
    x = [math.log(float(r["image_bytes_per_image"])) for r in ladder_runs]
    y = [float(r["test_accuracy"]) for r in ladder_runs]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    intercept = my - slope * mx
    assert f"accuracy = {intercept:.4f} {'+' if slope >= 0 else '-'} {abs(slope):.4f} ln(" in readme, (intercept, slope)
    at_raw = intercept + slope * math.log(32 * 32 * 3)
    assert f"**{100 * at_raw:.2f}%**" in readme, at_raw
    print(f"fit: accuracy = {intercept:.4f} + {slope:.4f} ln(image bytes); at raw pixels {100 * at_raw:.2f}%")
    return checked + 3


if __name__ == "__main__":
    here = pathlib.Path(sys.argv[1])
    print(f"{check_folder(here)} figures and verdicts recomputed from {here}/store, each as the committed files say")
