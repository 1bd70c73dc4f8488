"""Verdicts on a reproduced table, from checks written in its sweep file next to the published figures.

Each check is judged on our table (never on absolute seconds across different hardware). `where`
picks rows: a value, or a list of values (`where = { threads = [8, 12, 16] }`); no `where` means
every row. `text` says the claim in words and where it comes from.

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

    [[checks]]                      # our figure against the published one, per matching row
    kind = "ratio"
    metric = "speedup"              # compared with book_speedup (or `published = "book_..."`)
    tolerance = 0.25                # |ours / published - 1| allowed
    where = { sparsity = 0.5 }
    max = 2.0                       # optional: our figure at most this (two devices: 2x), whatever the tolerance

    [[checks]]                      # a bound on our own figure: a floor (min > 1 on a speed-up), a ceiling
    kind = "bound"
    metric = "speedup"
    min = 1.1                       # and/or max = ...
    where = { execution = "script" }

    [[checks]]                      # the metric at one row against the same metric at another
    kind = "compare"
    metric = "train_time_s"
    where = { backend = "ccl" }     # the rows the claim is about ...
    against = { backend = "gloo" }  # ... against these, paired on the axes both leave alike
    max_ratio = 0.97                # ours/against at most (and/or min_ratio = ...)
    within = 0.02                   # and/or |ours - against| at most (accuracy "the same")

    [[checks]]                      # the stated row has the lowest (or highest) value of all rows
    kind = "best"
    metric = "test_accuracy"
    goal = "highest"                # or "lowest"; a tie is not a win
    row = { lr = 0.4 }

    [[checks]]                      # no effect: (largest - smallest) / smallest across the rows
    kind = "flat"
    metric = "epoch_time_mean_s"
    tolerance = 0.15

Every kind also takes (the models and their defaults: harness/specs/checkkinds.py):
    needs = { cores = 16 }          # what the document's machine had that the claim depends on
                                    # (harness/report/measured_on.py): a FAIL on cells measured without
                                    # it is "DIFFERS: machine", with the reason; a PASS stays a PASS.
                                    # The reason names the document's machine as the sweep file's
                                    # [published] machine = "the book's 16-core machine" says.
    scales = ["full"]               # judged only at these scales (an absolute accuracy needs the
                                    # document's data and epochs); N/A elsewhere, saying so
    on = "ours"                     # the published rows cannot judge it (no such figure printed) ...
    reason = "d2l prints no outputs"  # ... and why (tests/test_checks_can_fail.py exempts exactly these)
    assumes = { model = "cnn" }     # the settings the claim is about: cells that ran others are N/A ...
    stand_ins = { dataset = "imagefolder" }  # ... but these are judged, labelled "(stand-in)"
    claim = "goal"                  # "published" (default), "goal" (this project's own), "consistency"
                                    # (true by construction on some machines) or "computed" (a figure our
                                    # code computes the same way every run): each counted in its class
                                    # (harness/report/evidence.py), never as a reproduced claim

Verdicts: PASS, FAIL, DIFFERS: machine, INCONCLUSIVE, or N/A when the table lacks the cells a check needs
(it says which).

How a verdict is reached on our tables (harness/report/tables.py passes the scale and the repeats):
- exact checks (a parameter count, a format's bits) keep two outcomes, PASS or FAIL, at every scale;
- at scale smoke every other check is N/A: smoke checks the machinery, not the claims;
- a timing check (a time, a speed-up, an efficiency) has three: PASS only when its whole 95% interval
  over the repeats passes, FAIL only when the whole interval fails, INCONCLUSIVE otherwise (one run is
  always inconclusive), with n and the interval;
- an accuracy check (compare, trend, best, bound, ratio) has the same three outcomes over seeds: a
  sweep's round r trains seed base + r for every row, so a row's repeats are its seeds and an
  accuracy's interval is over them; a row of one seed (a store from before seeds per round) is
  INCONCLUSIVE, saying "one seed";
- an accuracy check is N/A while its reference rows are within chance (10%) plus 3 standard errors
  of the test-set size: a claim about accuracy cannot be judged on an untrained model (for a best,
  the rows are its own and its nearest rival's: two untrained rows tie, and a "highest" whose own
  row is untrained is N/A whatever the rival; a trend ranks its untrained
  rows as one level and is N/A while fewer than 3 of its rows learned);
- a check whose `needs` this machine lacks is a stand-in result whatever its verdict; its FAIL is
  DIFFERS: machine only when the figure misses the claim on the side the missing resource predicts
  (fewer cores, no GPU, an emulated dtype: a smaller speed-up, a longer time), else it stays a FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import pandas as pd

from harness.specs.checkkinds import Best, Bound, Check, Compare, Exact, Flat, Ratio, Trend, parse
from harness.report import contention, intervals
from harness.report.figure_kinds import is_accuracy, is_time, is_timing
from harness.report.measured_on import MeasuredOn


class Judgement(StrEnum):
    """A check's verdict, as every report prints it; the members' order is the order a summary
    counts them in."""
    PASS = "PASS"
    FAIL = "FAIL"
    DIFFERS = "DIFFERS: machine"    # a FAIL on the side this machine's missing resource predicts
    INCONCLUSIVE = "INCONCLUSIVE"   # a timing whose interval neither passes nor fails as a whole
    NA = "N/A"                      # the table lacks what the check needs (the detail says which)


VERDICTS = tuple(Judgement)   # the order a summary counts them in
DOCUMENT_MACHINE = "the document's machine"
SMOKE_REASON = "smoke checks the machinery, not the claims"
CHANCE = 0.10   # every dataset here has 10 classes (CIFAR-10, Fashion-MNIST, digits, synthetic)
RESAMPLE_PASS = 0.975   # a resampled check passing this often (or failing) decides a trend, flat or best


@dataclass
class Verdict:
    check: str       # the check in words
    verdict: Judgement
    detail: str      # what was measured (and, for DIFFERS, why this machine cannot show the claim)
    kind: str = ""   # the check's kind: "exact" facts are counted apart from measured claims
    stand_in: bool = False   # measured without what the claim needs (cores, GPUs, native dtype)
    side: str = ""   # on a FAIL of a bound, ratio or compare: "low" or "high", the side it missed on
    claim: str = "published"   # a document's claim, the project's "goal", a "consistency" check or a "computed" fact
    metric: str = ""  # the metric it judged: a timing claim is told from others by it (harness/report/evidence.py)

    @property
    def label(self) -> str:
        return f"{self.verdict} (stand-in)" if self.stand_in and self.verdict != Judgement.DIFFERS else self.verdict


def evaluate(checks: Iterable[Check | dict], table: pd.DataFrame, *, axes: list[str] | None = None,
             measured: MeasuredOn | None = None, machine: str = DOCUMENT_MACHINE,
             scale: str | None = None, repeats: int | None = None,
             settings: dict[str, set[str]] | None = None) -> list[Verdict]:
    """Each check's verdict on `table` (a check given as its TOML table is read as its kind's model
    first; one that is no check is N/A, saying why). `axes` are the sweep's axes (a `compare` pairs
    its rows on the ones it does not name); `measured` what the cells ran on, `machine` what the
    document's is called; `scale` the table's scale (None: judge every check, as on the published
    rows); `repeats` the runs each grid point should have: above 1, timing checks have three
    outcomes (None: two, as on the published rows, which are single figures); `settings` what the
    cells ran with (param -> the values found), for the settings a check `assumes`."""
    verdicts = []
    for entry in checks:
        try:
            check = parse(entry)
        except ValueError as err:   # a table no kind reads (sweep files are read before this): never a PASS
            verdicts.append(Verdict(str(entry), Judgement.NA, str(err)))
            continue
        verdict = _judge(check, table, axes or [], measured, machine, scale, repeats, settings or {})
        verdict.claim, verdict.metric = check.claim, check.metric
        verdicts.append(verdict)
    return verdicts


def _assumed(check: Check, settings: dict[str, set[str]]) -> tuple[str, str]:
    """Why the cells' settings are not the ones the claim is about ("" when they are), and the
    stand-ins among them ("" when none): a setting the cells did not log is not held against them."""
    other, standing = [], []
    for key, want in (check.assumes or {}).items():
        found = settings.get(key)
        if not found:
            continue
        wanted = _texts(want)
        if found <= wanted:
            continue
        allowed = _texts((check.stand_ins or {}).get(key))
        shown = "/".join(sorted(found))
        if found <= wanted | allowed:
            standing.append(f"{key} {shown} for {'/'.join(sorted(wanted))}")
        else:
            other.append(f"{key} {shown}")
    if other:
        assumed = ", ".join(f"{k}={'/'.join(sorted(_texts(v)))}" for k, v in check.assumes.items())
        return f"the claim assumes {assumed}; these cells ran {', '.join(other)}", ""
    return "", "; ".join(standing)


def _texts(value) -> set[str]:
    """A setting (or a list of them) as the cells' params spell it."""
    if value is None:
        return set()
    return {str(v).lower() if isinstance(v, bool) else str(v) for v in (value if isinstance(value, list) else [value])}


def _judge(check: Check, table: pd.DataFrame, axes: list[str], measured: MeasuredOn | None,
           machine: str, scale: str | None, repeats: int | None = None,
           settings: dict[str, set[str]] | None = None) -> Verdict:
    off_scale = _off_scale(check, scale)
    if off_scale:   # the scale's reason comes first: a smoke table judges no claim, whatever it ran
        return off_scale
    other, standing = _assumed(check, settings or {})
    if other:
        return Verdict(check.name, Judgement.NA, other, check.kind)
    verdict = _judge_here(check, table, axes, measured, machine, scale, repeats)
    if standing and verdict.verdict != Judgement.NA:
        verdict.stand_in = True
        verdict.detail += f" (a stand-in: {standing})"
    return verdict


def _off_scale(check: Check, scale: str | None) -> Verdict | None:
    """N/A when the check is not judged at this scale (an absolute accuracy needs the document's data
    and epochs; at smoke only exact facts are judged), saying why; else None."""
    if scale is not None and check.scales and scale not in check.scales:
        return Verdict(check.name, Judgement.NA, f"judged at scale {', '.join(check.scales)} only (the document's data "
                       f"and epochs); this table is scale {scale}", check.kind)
    if scale == "smoke" and check.kind != "exact" and "smoke" not in check.scales:
        return Verdict(check.name, Judgement.NA, SMOKE_REASON, check.kind)
    return None


def _judge_here(check: Check, table: pd.DataFrame, axes: list[str], measured: MeasuredOn | None,
                machine: str, scale: str | None, repeats: int | None = None) -> Verdict:
    kind, name = check.kind, check.name
    at_chance = _at_chance(check, table) if scale is not None and kind != "exact" else None
    if at_chance:
        return Verdict(name, Judgement.NA, at_chance, kind)
    left_out = ""
    if is_timing(check.metric, table):   # a verdict never rests on a time taken under contention
        read = pd.concat([rows_where(table, rows) for rows in check.row_sets().values()] or [table])
        table, left_out = contention.for_check(table, check.metric, read, axes,
                                               derived=check.metric in ("speedup", "efficiency"))
    if repeats is not None and repeats > 1 and is_timing(check.metric, table):
        verdict = _judge_timing(check, table, axes)
    elif repeats is not None and is_accuracy(check.metric) and kind != "exact":
        verdict = _judge_accuracy(check, table, axes)
    else:
        verdict = JUDGES[kind](check, table, axes)
    verdict.kind = kind
    if left_out:
        verdict.detail += f" ({left_out})"
    lacking = measured.lacks(check.needs, machine) if measured is not None else []
    if not lacking:
        return verdict
    verdict.stand_in = True
    if verdict.verdict == Judgement.FAIL:
        predicted = "high" if is_time(check.metric) else "low"
        if verdict.side == predicted:
            how = "longer" if predicted == "high" else "smaller"
            return Verdict(verdict.check, Judgement.DIFFERS, f"{verdict.detail}; {'; '.join(lacking)}: that predicts a "
                           f"{how} {check.metric}, and ours is {how} than the claim", kind, True, verdict.side)
        verdict.detail += (f" (a stand-in: {'; '.join(lacking)}; that predicts the other side, so it stays a FAIL)"
                           if verdict.side else f" (a stand-in: {'; '.join(lacking)})")
        return verdict
    verdict.detail += f" (a stand-in: {'; '.join(lacking)})"
    return verdict


def _chance_ceiling(check: Check, table: pd.DataFrame) -> float | None:
    """The accuracy at or below which a row of this table has not learned: chance plus 3 standard
    errors of its test-set size (None for a metric that is no accuracy, or an unknown test set)."""
    tested = table.attrs.get("test_samples")
    if "accuracy" not in check.metric or not tested or check.metric not in table:
        return None
    return CHANCE + 3 * math.sqrt(CHANCE * (1 - CHANCE) / tested)


def _at_chance(check: Check, table: pd.DataFrame) -> str | None:
    """Why an accuracy check cannot be judged: its reference rows are at chance (or None)."""
    ceiling = _chance_ceiling(check, table)
    if ceiling is None:
        return None
    metric = check.metric
    bound = (f"within chance ({100 * CHANCE:.0f}%) plus 3 standard errors of "
             f"{table.attrs['test_samples']:,.0f} test images ({100 * ceiling:.1f}%)")
    if isinstance(check, Best):
        # A best is decided between its row and the nearest rival: two untrained rows tie at chance,
        # and which of them is lower is noise even when some other row has learned.
        pair = _stated_and_rival(check, table)
        if pair is None:
            return None
        if check.goal == "highest" and pair[0][metric] <= ceiling < pair[1][metric]:
            # "the highest" said of a row that has not learned cannot be the claim's row winning
            # or losing: it lost to training, not to the rival's setting.
            return (f"{metric} of {_where_text(check.row)} ({100 * pair[0][metric]:.1f}%) is {bound}: a row that "
                    "has not learned cannot be the highest or lose to another")
        if max(row[metric] for row in pair) > ceiling:
            return None
        return (f"{metric} of {_where_text(check.row)} and of its nearest rival ({100 * pair[0][metric]:.1f}%, "
                f"{100 * pair[1][metric]:.1f}%) are both {bound}: the order of two untrained rows is noise")
    if isinstance(check, Trend):
        # The untrained rows of a trend tie (_trend ranks them as one level); what is left to show
        # a direction is the rows that learned, and a trend needs three points.
        points = rows_where(table, check.where)[[check.x, metric]].dropna() if check.x in table else table.iloc[0:0]
        learned = int((points[metric] > ceiling).sum())
        if len(points) < 3 or learned >= 3 or learned == len(points):
            return None   # too few points is _trend's own N/A
        shown = ", ".join(f"{check.x}={x:g}: {100 * v:.1f}%" for x, v in points.sort_values(check.x).values)
        return (f"{len(points) - learned} of {len(points)} rows are {bound} ({shown}): "
                f"{learned} row(s) that learned cannot show a trend, which needs 3")
    reference = check.against if isinstance(check, Compare) else check.where
    values = rows_where(table, reference)[metric].dropna()
    if values.empty or (values > ceiling).any():
        return None
    return (f"{metric} of the reference rows ({', '.join(f'{100 * v:.1f}%' for v in values)}) is {bound}: "
            "a model that has not learned cannot judge an accuracy claim")


def _stated_and_rival(check: Best, table: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """A best check's stated row and its nearest rival, the best of the other finished rows (None
    when the stated row is missing or has no rival)."""
    rows = rows_where(table, check.where).dropna(subset=[check.metric])
    stated = rows_where(rows, check.row)
    if stated.empty or len(rows) < 2:
        return None
    others = rows.drop(stated.index)
    rival = others[check.metric].idxmin() if check.goal == "lowest" else others[check.metric].idxmax()
    return stated.iloc[0], others.loc[rival]


def rows_where(table: pd.DataFrame, where: dict | None) -> pd.DataFrame:
    """The rows of `table` a check names: each key equal to its value, or in its list; none when the
    table lacks a key (a check reads only what the cells logged)."""
    rows = table
    for key, value in (where or {}).items():
        if key not in rows:
            return rows.iloc[0:0]
        rows = rows[rows[key].isin(value)] if isinstance(value, list) else rows[rows[key] == value]
    return rows


def _where_text(where: dict | None) -> str:
    return ", ".join(f"{k} in {'/'.join(map(str, v))}" if isinstance(v, list) else f"{k}={v}"
                     for k, v in (where or {}).items()) or "every row"


def _low_high(check: Bound | Compare) -> tuple[float, float]:
    """The allowed range a bound (min, max) or a compare (min_ratio, max_ratio) states; open where unset."""
    low, high = (check.min, check.max) if isinstance(check, Bound) else (check.min_ratio, check.max_ratio)
    return (float("-inf") if low is None else low), (float("inf") if high is None else high)


def _exact(check: Exact, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, expected, where = check.metric, check.expected, check.where
    name = check.text or f"{metric} at {_where_text(where)} is exactly {expected:,}"
    values = rows_where(table, where)[metric].dropna() if metric in table else pd.Series(dtype=float)
    if values.empty:
        return Verdict(name, Judgement.NA, f"no finished cell at {_where_text(where)}")
    bad = [v for v in values if v != expected]
    return Verdict(name, Judgement.FAIL if bad else Judgement.PASS, f"measured {', '.join(f'{v:,.0f}' for v in values)}")


def _trend(check: Trend, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, x, direction = check.metric, check.x, check.direction
    need = float(check.min_correlation)
    rows = rows_where(table, check.where)
    name = check.text or f"{metric} is {direction} in {x} (rank correlation >= {need:g})"
    if metric not in rows or x not in rows:
        return Verdict(name, Judgement.NA, f"the table has no {metric if metric not in rows else x} column")
    points = rows[[x, metric]].dropna()
    ceiling = _chance_ceiling(check, table)
    if ceiling is not None:   # untrained rows are one level: their order among themselves is noise
        points[metric] = points[metric].where(points[metric] > ceiling, CHANCE)
    if len(points) < 3:
        return Verdict(name, Judgement.NA, f"{len(points)} finished points; a trend needs 3")
    if points[metric].nunique() == 1:   # no trend at all (a rank correlation is undefined)
        return Verdict(name, Judgement.FAIL, f"{metric} is the same in all {len(points)} points")
    rho = points[x].rank().corr(points[metric].rank())
    signed = -rho if direction == "decreasing" else rho
    return Verdict(name, Judgement.PASS if signed >= need else Judgement.FAIL, f"Spearman rho = {rho:+.2f} over {len(points)} points")


def _ratio(check: Ratio, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, tolerance, where = check.metric, float(check.tolerance), check.where
    published = check.published_column
    name = check.text or (f"{metric} within {tolerance:.0%} of the published one at {_where_text(where)}")
    rows = rows_where(table, where)
    if metric not in rows or published not in rows:
        return Verdict(name, Judgement.NA, f"the table has no {metric if metric not in rows else published} column")
    pairs = rows[[metric, published]].dropna()
    if pairs.empty:
        return Verdict(name, Judgement.NA, "no row has both our figure and the published one")
    ratios = pairs[metric] / pairs[published]
    low, high = _ratio_range(check, pairs[published])
    inside = (ratios >= low) & (ratios <= high)
    detail = "ours/published = " + ", ".join(f"{r:.2f}" for r in ratios)
    if check.max is not None:
        detail += f" (ours at most {check.max:g})"
    side = "" if inside.all() else "low" if (ratios < low).any() else "high"
    return Verdict(name, Judgement.PASS if inside.all() else Judgement.FAIL, detail, side=side)


def _ratio_range(check: Ratio, published: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The allowed range of ours/published, row by row: 1 +- tolerance, capped where our figure has
    a ceiling of its own (`max`: two devices cannot be more than 2x one)."""
    tolerance = float(check.tolerance)
    low = pd.Series(1 - tolerance, index=published.index)
    high = pd.Series(1 + tolerance, index=published.index)
    if check.max is not None:
        high = high.where(high <= check.max / published, check.max / published)
    return low, high


# Metrics a run that never met its target leaves out rather than recording a number
# (harness/training/time_to_accuracy.py): under a ceiling, such a finished cell is above any bound.
UNREACHED_IS_ABOVE = ("time_to_accuracy_s", "epochs_to_accuracy")


def _finished_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["repeats"] > 0] if "repeats" in rows else rows.iloc[0:0]


def _never_reached(check: Check, table: pd.DataFrame) -> bool:
    """A ceiling on a time to accuracy whose finished cells all missed the target: a fact about
    accuracy, which no number of timing repeats changes."""
    if not isinstance(check, Bound) or check.metric not in UNREACHED_IS_ABOVE or _low_high(check)[1] == float("inf"):
        return False
    finished = _finished_rows(rows_where(table, check.where))
    return (not finished.empty and "target_reached" in finished and (finished["target_reached"] == 0).all()
            and (check.metric not in finished or finished[check.metric].isna().all()))


def _bound(check: Bound, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, where = check.metric, check.where
    low, high = _low_high(check)
    name = check.text or f"{metric} within [{low:g}, {high:g}] at {_where_text(where)}"
    rows = rows_where(table, where)
    values = rows[metric].dropna() if metric in table else pd.Series(dtype=float)
    if values.empty:
        finished = _finished_rows(rows)
        if _never_reached(check, table):
            return Verdict(name, Judgement.FAIL, f"the target was never reached in the {len(finished)} finished "
                           f"cell(s) at {_where_text(where)}", side="high")
        if not finished.empty:
            return Verdict(name, Judgement.NA, f"the finished cells at {_where_text(where)} have no {metric}")
        return Verdict(name, Judgement.NA, f"no finished cell at {_where_text(where)}")
    inside = values.between(low, high)
    side = "low" if (values < low).any() else "high"
    return Verdict(name, Judgement.PASS if inside.all() else Judgement.FAIL, "measured " + ", ".join(f"{v:.3g}" for v in values),
                   side="" if inside.all() else side)


def _compare(check: Compare, table: pd.DataFrame, axes: list[str]) -> Verdict:
    """Rows at `where` against rows at `against`, paired on the axes the two do not set apart (ccl
    against gloo at each layout: both may name world_size = [2, 4, 8]); every pair must hold."""
    metric, where, against = check.metric, check.where, check.against
    low, high = _low_high(check)
    within = float("inf") if check.within is None else check.within
    name = check.text or f"{metric} at {_where_text(where)} against {_where_text(against)}"
    if metric not in table:
        return Verdict(name, Judgement.NA, f"the table has no {metric} column")
    on = [a for a in axes if a in table and where.get(a) == against.get(a)]
    ours = rows_where(table, where)[on + [metric]].dropna(subset=[metric])
    theirs = rows_where(table, against)[on + [metric]].dropna(subset=[metric])
    pairs = ours.merge(theirs, on=on, suffixes=("", "_against")) if on else \
        ours.merge(theirs, how="cross", suffixes=("", "_against"))
    if pairs.empty:
        side = _where_text(where) if ours.empty else _where_text(against)
        return Verdict(name, Judgement.NA, f"no finished cell at {side}" + ("" if ours.empty or theirs.empty else
                                                                  f" pairs with one at the same {', '.join(on)}"))
    a, b = pairs[metric], pairs[f"{metric}_against"]
    ratio, diff = a / b, (a - b).abs()
    holds = ratio.between(low, high) & (diff <= within)
    shown = []
    for i in pairs.index:
        label = " ".join(f"{k}={pairs.at[i, k]}" for k in on)
        figure = f"{a[i]:.3g} vs {b[i]:.3g} (ratio {ratio[i]:.2f}, difference {diff[i]:.3g})"
        shown.append(f"{label}: {figure}" if label else figure)
    side = "" if holds.all() else "low" if (ratio < low).any() or ((diff > within) & (a < b)).any() else "high"
    return Verdict(name, Judgement.PASS if holds.all() else Judgement.FAIL, "; ".join(shown), side=side)


def _best(check: Best, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, row, goal = check.metric, check.row, check.goal
    name = check.text or f"{_where_text(row)} has the {goal} {metric}"
    if metric not in table:
        return Verdict(name, Judgement.NA, f"the table has no {metric} column")
    pair = _stated_and_rival(check, table)
    if pair is None:
        stated = rows_where(rows_where(table, check.where).dropna(subset=[metric]), row)
        return Verdict(name, Judgement.NA, f"no finished cell at {_where_text(row)}" if stated.empty else
                       "one finished row; a best needs two")
    stated, rival = pair
    wins = stated[metric] < rival[metric] if goal == "lowest" else stated[metric] > rival[metric]
    label = " ".join(f"{k}={rival[k]}" for k in row if k in rival.index)
    return Verdict(name, Judgement.PASS if wins else Judgement.FAIL,
                   f"{_where_text(row)}: {stated[metric]:.3g}; the {goal} of the others {rival[metric]:.3g} ({label})")


def _flat(check: Flat, table: pd.DataFrame, axes: list[str]) -> Verdict:
    metric, tolerance, where = check.metric, float(check.tolerance), check.where
    name = check.text or f"{metric} flat within {tolerance:.0%} at {_where_text(where)}"
    values = rows_where(table, where)[metric].dropna() if metric in table else pd.Series(dtype=float)
    if len(values) < 2:
        return Verdict(name, Judgement.NA, f"{len(values)} finished row(s) at {_where_text(where)}; flat needs 2")
    smallest, largest = values.min(), values.max()
    spread = (largest - smallest) / abs(smallest) if smallest else float("inf") if largest else 0.0
    return Verdict(name, Judgement.PASS if spread <= tolerance else Judgement.FAIL,
                   f"spread {spread:.0%} over {len(values)} rows ({smallest:.3g} to {largest:.3g})")


def _rounds_of(table: pd.DataFrame, metric: str, where: dict | None) -> dict[int, float]:
    """The cells' values of `metric` at the one grid point `where` picks, by round (repeat)."""
    rounds = table.attrs["rounds"].cells if "rounds" in table.attrs else None
    if rounds is None or metric not in rounds:
        return {}
    picked = rows_where(rounds, where)
    return dict(zip(picked["repeat"], picked[metric])) if len(picked) else {}


def _fewest_runs(check: Check, table: pd.DataFrame) -> int:
    """The fewest repeats among the rows the check reads (0 when it reads none)."""
    if "repeats" not in table:
        return 0
    picked = pd.concat([rows_where(table, rows) for rows in check.row_sets().values()] or [table])
    counts = picked["repeats"].dropna()
    return int(counts.min()) if len(counts) else 0


def evidence_n(check: Check | dict, table: pd.DataFrame) -> int:
    """The n a check's verdict rests on: the fewest seeds of its rows for an accuracy, the fewest
    runs for anything else (0 when it reads no finished row)."""
    check = parse(check)
    return _fewest_seeds(check, table) if is_accuracy(check.metric) else _fewest_runs(check, table)


def _fewest_seeds(check: Check, table: pd.DataFrame) -> int:
    """The fewest seeds among the rows the check reads (0 when it reads none)."""
    if "seeds" not in table:
        return 1 if _fewest_runs(check, table) else 0
    picked = pd.concat([rows_where(table, rows) for rows in check.row_sets().values()] or [table])
    counts = picked["seeds"].dropna()
    return int(counts.min()) if len(counts) else 0


def _judge_timing(check: Check, table: pd.DataFrame, axes: list[str]) -> Verdict:
    """A timing claim judged on its interval over the rounds: PASS when the whole interval passes,
    FAIL when the whole interval fails, INCONCLUSIVE otherwise (and always on one run)."""
    n = _fewest_runs(check, table)
    return _judge_on_interval(check, table, axes, n, "", f"n = {n} run(s) per grid point: one timing cannot decide "
                              "a claim (more rounds can: the report gives the --until-decided command below its checks)")


def _judge_accuracy(check: Check, table: pd.DataFrame, axes: list[str]) -> Verdict:
    """An accuracy claim judged on its interval over seeds (a sweep's round r trains seed base + r, so
    a row's repeats are its seeds), as a timing is on its rounds: one seed decides nothing."""
    n = _fewest_seeds(check, table)
    return _judge_on_interval(check, table, axes, n, " seeds", f"one seed (n = {n} per grid point): the accuracy "
                              "of one training cannot decide a claim (its repeats, if any, trained the same seed)")


def _judge_on_interval(check: Check, table: pd.DataFrame, axes: list[str], n: int, unit: str,
                       one: str) -> Verdict:
    point = JUDGES[check.kind](check, table, axes)
    if point.verdict == Judgement.NA or _never_reached(check, table):
        return point
    if n < 2:
        return Verdict(point.check, Judgement.INCONCLUSIVE, f"{point.detail}; {one}")
    lo_col, hi_col = intervals.bounds(check.metric)
    if isinstance(check, (Bound, Ratio)) and lo_col in table:
        return _interval_verdict(check, table, point, n, lo_col, hi_col, unit)
    if isinstance(check, Compare) and check.within is None:
        return _compare_interval(check, table, axes, point, n, unit)
    return _resampled_verdict(check, table, axes, point, n, unit)


def _within(lo: float, hi: float, low: float, high: float) -> Judgement:
    """An interval [lo, hi] against the allowed range [low, high]: wholly inside, wholly outside, or neither."""
    return Judgement.PASS if lo >= low and hi <= high else Judgement.FAIL if hi < low or lo > high else Judgement.INCONCLUSIVE


def _interval_verdict(check: Bound | Ratio, table: pd.DataFrame, point: Verdict, n: int, lo_col: str,
                      hi_col: str, unit: str = "") -> Verdict:
    """bound and ratio: each row's interval against the allowed range."""
    rows = rows_where(table, check.where)
    metric = check.metric
    if isinstance(check, Ratio):
        published = check.published_column
        rows = rows.dropna(subset=[metric, published])
        scale = rows[published]
        lows, highs = _ratio_range(check, scale)
        what = "ours/published"
    else:
        rows = rows.dropna(subset=[metric])
        scale = pd.Series(1.0, index=rows.index)
        low, high = _low_high(check)
        lows, highs = pd.Series(low, index=rows.index), pd.Series(high, index=rows.index)
        what = metric
    states, shown = [], []
    for i in rows.index:
        lo, hi = rows.at[i, lo_col] / scale[i], rows.at[i, hi_col] / scale[i]
        if pd.isna(lo) or pd.isna(hi):
            states.append(Judgement.INCONCLUSIVE)
            shown.append(f"{rows.at[i, metric] / scale[i]:.3g} (no interval)")
            continue
        states.append(_within(lo, hi, lows[i], highs[i]))
        shown.append(intervals.format_ratio(rows.at[i, metric] / scale[i], lo, hi, suffix=""))
    detail = f"{what} " + ", ".join(shown) + f" (95% interval, n = {n}{unit})"
    if isinstance(check, Ratio) and check.max is not None:
        detail += f"; ours at most {check.max:g}: ours/published at most " + ", ".join(f"{h:.2f}" for h in highs)
    if Judgement.FAIL in states:
        side = "low" if any(rows.at[i, hi_col] / scale[i] < lows[i] for i in rows.index) else "high"
        return Verdict(point.check, Judgement.FAIL, detail, side=side)
    return Verdict(point.check, Judgement.PASS if states and all(x == Judgement.PASS for x in states) else Judgement.INCONCLUSIVE, detail)


def _compare_interval(check: Compare, table: pd.DataFrame, axes: list[str], point: Verdict, n: int,
                      unit: str = "") -> Verdict:
    """compare on a timing: the ratio of the two rows' medians with its interval over the rounds."""
    metric, where, against = check.metric, check.where, check.against
    low, high = _low_high(check)
    on = [a for a in axes if a in table and where.get(a) == against.get(a)]
    ours = rows_where(table, where).dropna(subset=[metric])
    states, shown = [], []
    for i in ours.index:
        shared = {a: ours.at[i, a] for a in on}
        here = {a: ours.at[i, a] for a in axes if a in table}
        theirs = rows_where(table, {**against, **shared}).dropna(subset=[metric])
        for j in theirs.index:
            there = {a: theirs.at[j, a] for a in axes if a in table}
            ratio = intervals.ratio_of_medians(_rounds_of(table, metric, here), _rounds_of(table, metric, there))
            states.append(_within(ratio.lo, ratio.hi, low, high) if ratio.decided else Judgement.INCONCLUSIVE)
            label = " ".join(f"{k}={v}" for k, v in shared.items())
            shown.append((f"{label}: " if label else "") + "ratio "
                         + intervals.format_ratio(ratio.value, ratio.lo, ratio.hi, suffix=""))
    if not states:
        return point
    detail = "; ".join(shown) + f" (95% interval, n = {n}{unit})"
    if Judgement.FAIL in states:
        return Verdict(point.check, Judgement.FAIL, detail, side=point.side or "high")
    return Verdict(point.check, Judgement.PASS if all(x == Judgement.PASS for x in states) else Judgement.INCONCLUSIVE, detail)


def _resampled_verdict(check: Check, table: pd.DataFrame, axes: list[str], point: Verdict, n: int,
                       unit: str = "") -> Verdict:
    """trend, flat, best (and a timing without interval columns): the check judged again on tables
    whose medians come from resampled rounds (tables.py's replicates); decided when it passes, or
    fails, in at least 97.5% of them."""
    replicates = table.attrs["rounds"].replicates.get(check.metric) if "rounds" in table.attrs else None
    if replicates is None:
        return Verdict(point.check, Judgement.INCONCLUSIVE, f"{point.detail}; no resampled rounds to judge it on (n = {n}{unit})")
    passes = 0
    for draw in replicates:
        copy = table.copy()
        copy[check.metric] = draw
        passes += JUDGES[check.kind](check, copy, axes).verdict == Judgement.PASS
    share = passes / len(replicates)
    detail = f"{point.detail}; passes in {share:.0%} of {len(replicates)} resampled rounds (n = {n}{unit})"
    if point.verdict == Judgement.PASS and share >= RESAMPLE_PASS:
        return Verdict(point.check, Judgement.PASS, detail)
    if point.verdict == Judgement.FAIL and share <= 1 - RESAMPLE_PASS:
        return Verdict(point.check, Judgement.FAIL, detail, side=point.side)
    return Verdict(point.check, Judgement.INCONCLUSIVE, detail)


# How each kind of harness/specs/checkkinds.py is judged on one table (its point verdict).
JUDGES: dict[str, Callable[..., Verdict]] = {"exact": _exact, "trend": _trend, "ratio": _ratio, "bound": _bound,
                                             "compare": _compare, "best": _best, "flat": _flat}
