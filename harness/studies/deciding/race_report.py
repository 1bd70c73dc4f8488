"""The report of `harness study NAME --verify`: the race's candidates, each with its in-study figure
beside the re-measured one, the winner named on the re-measured intervals only, its speed-up over
the tuned baseline with an interval, and the winner's ablation (verify.py runs them).
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pandas as pd

from experiments import make_config
from harness.studies import trial_target
from harness.studies.deciding.race import MIN_SEEDS, RaceResult
from harness.studies.deciding.variants import searches_lr
from harness.studies.study_report import markdown
from harness.specs.study_spec import StudySpec

TIME = "time_to_accuracy_s"
# roles in the race's CSV: the tuned baseline, its neighbours (half and twice its lr, beside it on the
# race's first seeds) and the leader's rows once it is named
TUNED, NEIGHBOURS, WINNER = "tuned baseline", ("tuned lr x/2", "tuned lr x2"), "winner"
RESAMPLES = 2000


def bootstrap_median(values: list[float], *, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (a target not reached counts as +inf)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def paired_bootstrap_ratio(slow: dict[int, float], fast: dict[int, float], *, resamples: int = RESAMPLES,
                           seed: int = 0) -> tuple[float, float, float, list[int]]:
    """The ratio median(slow) / median(fast) over the seeds both ran, and its 95% paired interval: the
    seeds are resampled, each keeping its pair, so a seed that is slow for both recipes (a hard
    initialisation) moves both medians together instead of widening the interval. Returns the ratio,
    the interval and the seeds it was formed on."""
    seeds = sorted(set(slow) & set(fast))
    if not seeds:
        return math.nan, math.nan, math.nan, []
    point = ratio(statistics.median(slow[s] for s in seeds), statistics.median(fast[s] for s in seeds))
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        drawn = rng.choices(seeds, k=len(seeds))
        ratios.append(ratio(statistics.median(slow[s] for s in drawn), statistics.median(fast[s] for s in drawn)))
    ratios.sort()
    return point, ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1], seeds


def ratio(a: float, b: float) -> float:
    if math.isinf(b):
        return 0.0
    return math.inf if math.isinf(a) else a / b


def fmt(v: float) -> str:
    return "not reached" if math.isinf(v) else f"{v:.3g}"


def fmt_speedup(x: float) -> str:
    """A speed-up over a baseline; 0 means the recipe did not reach the target (its time is +inf)."""
    if x == 0:
        return "none (the recipe did not reach the target)"
    return "not reached by the baseline" if math.isinf(x) else f"{x:.3g}x"


def methods_text(spec: StudySpec, params: dict[str, Any]) -> str:
    """`dtype=bf16, execution=eager, world_size=1 threads=0`: a choice that sets fields of its own (a dict,
    or the study's label of one, "world_size=1 threads=0") shows them, not its own key again."""
    def shown(key: str, value: Any) -> str:
        if isinstance(value, dict):
            return " ".join(f"{k}={v}" for k, v in value.items())
        return str(value) if "=" in str(value) else f"{key}={value}"

    return ", ".join(shown(k, v) for k, v in params.items())


def text(spec: StudySpec, name: str, scale: str, target: float, fixed: dict[str, Any], base, candidates,
         result: RaceResult, runs: list[dict[str, Any]], tuned_factor: float, methods: list[str]) -> str:
    by_role: dict[str, list[dict]] = {}
    for r in runs:
        by_role.setdefault(r["role"], []).append(r)
    budget = make_config(fixed).epochs
    lines = [f"# {spec.title}: the front raced over seeds", "", f"Study `{name}` at scale **{scale}**. "
             + _target_line(spec, scale, target, fixed) + f" Every run below is given at most {budget} epoch(s), "
             "each in a fresh process (forked from a server that had imported torch and run nothing); time to the "
             "target counts training steps only. "
             f"In the study, {spec.baseline.name} (trial {base.number}) took {fmt(base.values[0])} s.", ""]
    lines += _reference_section(spec, by_role, result, tuned_factor)
    lines += _neighbours_section(by_role, tuned_factor)
    lines += _race_section(spec, candidates, result, by_role)
    lines += _winner_section(spec, candidates, result)
    # the ablation's reference (verify._ablation_reference): the tuned baseline where the study searches
    # lr_factor, else the baseline's own params
    against = result.reference.name if searches_lr(spec) else spec.baseline.name
    lines += _ablation_section(by_role, result, methods, against)
    lines.append(f"*Written by `harness study {spec.name.removeprefix('study_')} --verify --scale {scale}`; "
                 "every run is in the CSV beside this file (its role, seed, time_to_accuracy_s and reached) and in "
                 "MLflow (tag harness.kind = verify).*")
    return "\n".join(lines) + "\n"


def _reference_section(spec: StudySpec, by_role: dict[str, list[dict]], result: RaceResult,
                       tuned_factor: float) -> list[str]:
    """How the reference the candidates race was chosen: an lr search, the calibration, or as it is."""
    search = [r for role, rs in by_role.items() if role.startswith("lr x") for r in rs]
    if search:
        return [f"## The tuned-lr baseline (seed {search[0]['seed']})", "",
                f"{spec.baseline.name} at lr x factor; the fastest to the target is the tuned baseline: "
                f"**lr x{tuned_factor:g}**.", "",
                markdown(pd.DataFrame([{"lr factor": r["lr_factor"], "lr": r["lr"], "time to target s": r[TIME],
                                        "test accuracy": r["test_accuracy"]} for r in search])), ""]
    if result.reference.name != TUNED:
        return [f"The reference is {spec.baseline.name} itself: experiment {spec.experiment} has no lr to tune.", ""]
    return [f"The tuned baseline is {spec.baseline.name} at lr x{tuned_factor:g}, as the target's calibration "
            "found it: the lowest median time to the target of the lr factors it timed, on its host.", ""]


def _neighbours_section(by_role: dict[str, list[dict]], tuned_factor: float) -> list[str]:
    """The tuned baseline beside its neighbours on the seeds they ran: whether its lr was the fastest
    on this host (the calibration's host may be another, and a time belongs to its host)."""
    beside = {role: by_role[role] for role in NEIGHBOURS if by_role.get(role)}
    if not beside:
        return []
    seeds = sorted({r["seed"] for rows in beside.values() for r in rows})
    rows = {TUNED: [r for r in by_role.get(TUNED, []) if r["seed"] in seeds], **beside}
    medians = {role: statistics.median(r[TIME] for r in rs) for role, rs in rows.items()}
    faster = [f"x{rows[role][0]['lr_factor']:g}" for role in beside if medians[role] < medians[TUNED]]
    tuned = f"x{tuned_factor:g}"
    verdict = (f"the tuned lr, {tuned}, was the fastest of the three on this host" if not faster else
               f"**{' and '.join(faster)} {'was' if len(faster) == 1 else 'were'} faster than the tuned lr, {tuned}, on this host**: the tuned baseline "
               f"raced below is short of its best lr here, and the speed-ups over it (still formed against {tuned}) "
               "flatter the candidates")
    table = [{"run": role, "lr factor": rs[0]["lr_factor"], "lr": rs[0].get("lr"),
              "time to target s, by seed": ", ".join(f"{r['seed']}: {fmt(r[TIME])}" for r in rs),
              "median s": fmt(medians[role])}
             for role, rs in sorted(rows.items(), key=lambda item: item[1][0]["lr_factor"])]
    return [f"## The tuned lr on this host (seeds {', '.join(map(str, seeds))})", "",
            f"The tuned baseline and, in its rounds, the same loop at half and twice its lr: {verdict}.", "",
            markdown(pd.DataFrame(table)), ""]


def _race_section(spec: StudySpec, candidates, result: RaceResult, by_role: dict[str, list[dict]]) -> list[str]:
    """Each candidate's in-study figure beside its re-measured median and interval."""
    in_study = {f"trial {t.number}": t.values[0] for t in candidates}
    reference, table = result.reference.name, []
    for label, entrant in [*result.entrants.items(), (reference, result.reference)]:
        lo, hi = entrant.interval
        reached = sum(math.isfinite(t) for t in entrant.times)
        table.append({
            "candidate": label + (" (winner)" if label == result.leader and result.named else ""),
            "in-study s": in_study.get(label, "(the reference)"), "re-measured median s": entrant.median,
            "95% interval s": f"{fmt(lo)} to {fmt(hi)}", "seeds": len(entrant.times),
            "reached": f"{reached}/{len(entrant.times)}",
            "resolution s": _median_of(by_role.get(WINNER if label == result.leader else label, []),
                                       "time_to_accuracy_resolution_s"),
            "in-study inside interval": ("yes" if lo <= in_study[label] <= hi else "no") if label in in_study else ""})
    v = spec.verify
    return ["## The race", "", f"The {len(candidates)} fastest trial(s) of the front, each re-measured on seeds "
            f"{', '.join(map(str, v.seeds))} in rounds with the {reference}: every candidate ran the first "
            f"{min(v.first_seeds, len(v.seeds))}, then only those whose interval still overlapped the leader's ran "
            f"more. Race ended: {result.stop}. Interval: the order-statistic 95% interval of the median (the range "
            "of five draws or fewer).", "", markdown(pd.DataFrame(table)), ""]


def _winner_section(spec: StudySpec, candidates, result: RaceResult) -> list[str]:
    """The winner, named on the re-measured intervals, its speed-up and the goal's verdict."""
    if not result.named:
        seeds = len(result.entrants[result.leader].times)
        return [f"**No winner named**: {result.stop}; the leader, {result.leader}, has {seeds} seed(s), fewer than "
                f"the {MIN_SEEDS} a winner is named on. Give the study more budget and run it again: it resumes "
                "the race where it was cut.", ""]
    leader, reference = result.entrants[result.leader], result.reference.name
    win = leader.times
    x, lo, hi, paired = paired_bootstrap_ratio(dict(zip(result.reference.seeds, result.reference.times)),
                                               dict(zip(leader.seeds, leader.times)))
    apart = "its interval overlaps no other candidate's" if result.separated else \
        "its interval still overlaps another candidate's: the lead is not established at these seeds"
    v = spec.verify
    every = all(math.isfinite(t) for t in win)
    verdict = "MET" if x >= v.goal_speedup and lo > v.goal_lower and every else "NOT MET"
    chosen = next(t for t in candidates if f"trial {t.number}" == result.leader)
    return [f"Winner, named on the re-measured intervals: **{result.leader}** ({methods_text(spec, chosen.params)}), "
            f"median {fmt(statistics.median(win))} s over {len(win)} seeds; {apart}.",
            f"- over the {reference}: **{fmt_speedup(x)}**, paired by seed over the {len(paired)} seeds both ran "
            f"(95% paired bootstrap interval {fmt(lo)}x to {fmt(hi)}x: the seeds resampled with their pairs; 0x: a "
            "resample whose median did not reach the target)",
            f"- goal (at least {v.goal_speedup:g}x the {reference}, interval's lower bound above {v.goal_lower:g}x, "
            f"every seed reaching the target): **{verdict}**", ""]


def _ablation_section(by_role: dict[str, list[dict]], result: RaceResult, methods: list[str],
                      against: str) -> list[str]:
    if not methods:
        return []
    ablation = [r for role, rs in by_role.items() if role.startswith(("alone:", "without:")) for r in rs]
    tuned_median = statistics.median(result.reference.times)
    return ["## Ablation of the winner", "", f"Its methods, where it differs from the {against}: "
            f"{', '.join(methods)}. \"alone\": that one change made to the {against}; \"without\": the winner "
            f"with that one change undone. Speed-up: over the {result.reference.name}'s median.", "",
            markdown(pd.DataFrame([{"variant": r["role"], "seed": r["seed"], "time to target s": r[TIME],
                                    "speedup": fmt_speedup(ratio(tuned_median, r[TIME])),
                                    "test accuracy": r["test_accuracy"],
                                    "changes": r["changes"] or "speed only"} for r in ablation])), ""]


def _target_line(spec: StudySpec, scale: str, target: float, fixed: dict[str, Any]) -> str:
    clock = (f" Checked every {fixed['check_every_samples']} training samples" + (f" on a probe of {fixed['probe_size']} test images, "
             "a crossing confirmed on the whole test set" if fixed.get("probe_size") else "") + "; each run's resolution "
             "is in the CSV (time_to_accuracy_resolution_s).") if fixed.get("check_every_samples") else ""
    if trial_target.calibrated_at(spec, scale):
        return (f"Target: test accuracy **{target:.4g}**, calibrated ({trial_target.path(spec, scale).name}): the tuned "
                f"{spec.baseline.name}'s median best within {spec.target.epochs[scale]} epoch(s), less "
                f"{spec.target.margin:g}." + clock)
    return (f"Target: test accuracy **{target:.4g}**, what {spec.baseline.name} reached at the end of epoch "
            f"{spec.baseline.target_epoch(scale)}, its budget; the same for every trial and run." + clock)


def _median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    """The median of a column over the runs that have it (a run that missed the target has no resolution)."""
    values = [r[key] for r in rows if r.get(key) is not None and not (isinstance(r[key], float) and math.isnan(r[key]))]
    return statistics.median(values) if values else None
