"""Every check of a sweep file judged again on the recomputed table, by the rules the page states
(its Conventions): the scale, the settings a claim assumes, accuracies at chance, timing and accuracy
checks over their 95% intervals or resampled rounds, what the cells were measured on (cores, GPUs,
native dtypes, backends); then each verdict's class and the table's headline claim."""
from __future__ import annotations

import math
import sys

try:
    import numpy as np
    import pandas as pd
except ImportError:
    sys.exit("recompute needs numpy, scipy and pandas: run it with the project's .venv/bin/python")

from read_store import repeats_at
from row_figures import Table, is_accuracy, is_time, is_timing, ratio_of_medians

CHANCE, DECIDE = 0.10, 0.975                  # 10 classes; a resampled check decided at 97.5%
CLASSES = ("book timing", "measured claim", "stand-in", "consistency", "exact fact", "computed fact", "project goal")
PLURALS = ("book timings", "measured claims", "stand-ins", "consistency", "exact facts", "computed facts",
           "project goals")
VERDICTS = ("PASS", "FAIL", "DIFFERS: machine", "INCONCLUSIVE", "N/A")


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
