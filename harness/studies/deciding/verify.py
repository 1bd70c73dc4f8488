"""`harness study NAME --verify`: the race. A study's winner is named only after its best trials are
re-measured, because the fastest of many single in-study draws is often the luckiest one.

Every run below is timed to the study's one target (calibrated, calibrated_target.py, or the
baseline trial's), within the same epoch budget, each in a fresh process (the fork server of
studies/isolation.py):

1. the tuned baseline: the calibration's lr factor when the target is calibrated; else the baseline's
   loop at the study's lr times each of `[verify] lr_factors` (and x1) on the first seed, the fastest
   to the target (an experiment with no lr to tune, airbench, races its baseline as it is);
2. the race (race.py): the fastest `[verify] candidates` of the Pareto front, each on the
   first `first_seeds` seeds, interleaved with the tuned baseline (and, right after it on those
   seeds only, its neighbours at half and twice its lr, roles `tuned lr x/2` and `tuned lr x2`: a
   time belongs to its host, and they show whether the tuned lr is the fastest on this one; the
   speed-up is still formed against the tuned baseline alone), then one more seed a round for
   the leader and every candidate whose median interval still overlaps the leader's, until the
   leader separates, the seeds run out or the `budget` would be passed; the leader is the winner
   (role `winner` in the CSV), named on these re-measured intervals only;
3. an ablation on the first `ablation_seeds` seeds: each method of the winner alone on the
   baseline, and the winner with each one left out; a method that changes more than speed (the
   model, the optimizer) is labelled so (`[verify.changes]`).

Each run is an MLflow run of the study's experiment (tag harness.kind = verify); a run already
finished with the same config is reused, so the command resumes where it was cut off and the race
takes the same path. The report (<study>-verify.md, race_report.py, and .csv, every run) goes
beside the study's.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

import pandas as pd

import experiments
from experiments import make_config
from harness.cells import preflight
from harness.specs.cell_spec import Cell
from harness.errors import UserError
from harness.folders import REPORTS_DIR
from harness.store import Store
from harness.studies import baseline as study_baseline, isolation, trial_target
from harness.studies.deciding import calibrated_target, method_cards, race, race_report, remeasure
from harness.studies.study_storage import open_study
# the race's roles (the other candidates: "trial N"; without an lr to tune, the baseline's own name)
from harness.studies.deciding.race_report import NEIGHBOURS, TUNED, WINNER  # noqa: F401
from harness.studies.deciding.race_report import (bootstrap_median, paired_bootstrap_ratio,  # noqa: F401
                                                  fmt_speedup as _fmt_speedup, methods_text as _methods)
from harness.studies.deciding.variants import (Variant, own_factor as _own_factor, params_of as _params, searches_lr,
                                               values_of as _values)
from harness.specs.study_spec import StudySpec

VERIFY = "verify"
ROLE = "harness.verify_role"    # tag: which part of the verification a run is (best, baseline, tuned, ...)
TIME = "time_to_accuracy_s"


def run_verify(spec: StudySpec, store: Store, db_url: str, *, scale: str, overrides: dict[str, Any],
               out_dir: Path | None = None, show_progress: bool = False, log=print,
               budgeted: bool = False) -> list[Path]:
    """The race and the ablation; `budgeted`: within what the study's wall-clock budget has left
    (studies/budget.py), each run's seconds spent from it, the race and the ablation cut short when
    the next round or run does not fit."""
    name = spec.study_name(scale, overrides)
    fixed = trial_target.applied(spec, scale, spec.fixed(scale, overrides))
    base, candidates, target = _entrants_of(spec, name, scale, db_url, fixed)
    fixed = {**fixed, "target_from_epoch": 0, "target_accuracy": target}
    book = _params(spec, base.params)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    preflight([make_config(fixed)])
    runs: list[dict[str, Any]] = []
    clock = _RaceClock.of(spec, name, db_url, log) if budgeted else None
    trials = isolation.runner(isolation.PROCESS)   # opened last: closed in the finally below
    try:
        def timed(variant: Variant, seed: int) -> dict[str, Any]:
            began = time.monotonic()
            row = _run(store, experiment_id, spec, name, scale, fixed, variant, seed, trials, show_progress, log)
            if clock is not None:
                clock.spend(time.monotonic() - began, row)
            runs.append(row)
            return row

        def done(variant: Variant, seed: int) -> bool:   # reused, not run again: it costs the budget nothing
            return remeasure.finished(store, experiment_id, name, _values(spec, fixed, variant, seed), kind=VERIFY)

        tuned = _tuned_baseline(spec, scale, book, timed)
        result = _race(spec, candidates, tuned, _beside(tuned), runs, timed, clock, done)
        winner = _params(spec, _trial_named(candidates, result.leader).params)
        methods = _ablation(spec, _ablation_reference(spec, book, tuned), winner, timed, clock, done) \
            if result.named else []
    finally:
        trials.close()
    text = race_report.text(spec, name, scale, target, fixed, base, candidates, result, runs, tuned.lr_factor, methods)
    cards = method_cards.cards(methods, winner, runs, result.reference.name, lambda k: _changes_of(spec, k),
                               title=spec.title, host=_host()) if result.named else None
    return _write(name, text, runs, out_dir, log, cards)


def _changes_of(spec: StudySpec, param: str) -> str:
    """What a searched parameter changes besides speed: the method table's kind and line for the
    fields it sets (harness/fields/catalogue.py), and the study file's own note, if it has one."""
    from harness.fields.catalogue import SPEED_METHODS, speed_method_of

    named = next((m for m in map(speed_method_of, spec.space[param].field_names()) if m), None)
    method = SPEED_METHODS.get(named) if named else None
    said = f"{method.changes}: {method.description}" if method else ""
    note = spec.verify.changes.get(param, "")
    return "; ".join(x for x in (said, note) if x)


def _host() -> str:
    from harness.machine.fingerprint import FINGERPRINT, fingerprint, machine_text

    here = fingerprint()
    return f"{machine_text(here)} (fingerprint {here[FINGERPRINT]})"


def _entrants_of(spec: StudySpec, name: str, scale: str, db_url: str, fixed: dict[str, Any]):
    """The study's baseline trial, the candidates to race and the target; one sentence when the
    study cannot be raced (yet)."""
    # the target: calibrated, else the baseline trial's own, else the file's fixed target_accuracy
    from_file = trial_target.calibrated_at(spec, scale) or not spec.targets_from_baseline
    if spec.baseline is None or not (from_file and fixed.get("target_accuracy") or spec.targets_from_baseline) \
            or spec.metrics[0] != TIME:
        raise UserError(f"study {spec.name} has no baseline and no target for {TIME}; --verify races a "
                        "time-to-accuracy study's best trials against its tuned baseline.")
    study = open_study(spec, name, db_url, create=False)
    base = study_baseline.finished(study)
    target = fixed["target_accuracy"] if from_file else study_baseline.target(study)
    if base is None or target is None:
        raise UserError(f"study {name} has no complete baseline trial yet; run the study first.")
    candidates = _candidates(spec, study, base.number)
    if not candidates:
        raise UserError(f"study {name} has no complete trial that reached the target {target:.4g}; nothing to verify.")
    return base, candidates, target


def _tuned_baseline(spec: StudySpec, scale: str, book: dict[str, Any], timed) -> Variant:
    """The reference the candidates race: the baseline at the calibration's lr factor; without a
    calibration, the fastest to the target of the baseline at each lr factor on the first seed. An
    experiment with no lr to scale (airbench sets its own) races its baseline as it is, by its name."""
    has_lr = "lr" in experiments.get(spec.experiment).reads
    role = TUNED if has_lr else spec.baseline.name
    known = trial_target.tuned_factor(spec, scale)
    if known is not None:   # the calibration found it, to the same target's accuracy
        return Variant(role, book, known / _own_factor(spec, book))
    factors = sorted({1.0, *map(float, spec.verify.lr_factors)}) if has_lr else [1.0]
    search = [timed(Variant(f"lr x{f:g}", book, f), spec.verify.seeds[0]) for f in factors]
    reached = [r for r in search if r["reached"]]
    factor = min(reached, key=lambda r: r[TIME])["lr_factor"] / _own_factor(spec, book) if reached else 1.0
    return Variant(role, book, factor)


class _RaceClock:
    """The race's share of a study's budget: each run's wall clock spent from it, and whether the
    next round or run still fits (its runs estimated at each entrant's median wall clock so far)."""

    def __init__(self, kept, log) -> None:
        self.kept, self.log = kept, log
        self.walls: dict[str, list[float]] = {}   # role -> the wall clock of each of its runs

    @classmethod
    def of(cls, spec: StudySpec, name: str, db_url: str, log) -> "_RaceClock | None":
        from harness.studies.budget import RACE, Budget

        kept = Budget.open(open_study(spec, name, db_url, create=False), None, log)
        if kept is None:
            return None
        kept.enter(RACE)
        log(f"race: {kept.line()}")
        return cls(kept, log)

    def spend(self, seconds: float, row: dict[str, Any]) -> None:
        self.kept.spend(seconds)
        self.walls.setdefault(row["role"], []).append(seconds)

    def estimate(self, role: str) -> float:
        """A run of `role`: its own median wall clock, else the slowest median of any role so far."""
        own = self.walls.get(role)
        if own:
            return statistics.median(own)
        known = [statistics.median(w) for w in self.walls.values()]
        return max(known) if known else 0.0

    def affords(self, roles: list[str]) -> bool:
        """Whether runs of `roles` fit what is left; none to run always does (the last run may have
        ended a little past the budget, leaving less than nothing)."""
        return not roles or sum(self.estimate(r) for r in roles) <= self.kept.left_s


def _beside(tuned: Variant) -> list[Variant]:
    """The tuned baseline's neighbours in the doubling grid (half and twice its lr); none without an lr."""
    if tuned.role != TUNED:
        return []
    return [Variant(role, tuned.params, factor)
            for role, factor in zip(NEIGHBOURS, calibrated_target.lr_neighbours(tuned.lr_factor))]


def _race(spec: StudySpec, candidates: list, tuned: Variant, beside: list[Variant], runs: list[dict[str, Any]],
          timed, clock: _RaceClock | None = None, done=lambda variant, seed: False) -> race.RaceResult:
    """The candidates raced over the seeds against the tuned baseline, `beside` it on the first seeds;
    the leader's rows become the winner's."""
    v = spec.verify
    entrants = {f"trial {t.number}": Variant(f"trial {t.number}", _params(spec, t.params)) for t in candidates}
    first = v.seeds[:min(v.first_seeds, v.neighbour_seeds)]

    def measure(role: str, seed: int) -> float:
        if role == tuned.role:
            return _tuned_round(tuned, beside if seed in first else [], seed, timed)
        return timed(entrants[role], seed)[TIME]

    def affordable(roles: list[str], seed: int) -> bool:   # the round's runs not already finished
        variants = {**entrants, tuned.role: tuned}
        return clock.affords([r for r in roles if not done(variants[r], seed)])

    result = race.race(list(entrants), measure, seeds=list(v.seeds), first=v.first_seeds, budget=v.budget,
                       reference=tuned.role, affordable=affordable if clock is not None else None)
    for row in runs:
        if row["role"] in entrants:
            row["trial"] = int(row["role"].split()[1])
        if row["role"] == result.leader and result.named:
            row["role"] = WINNER
    return result


def _tuned_round(tuned: Variant, beside: list[Variant], seed: int, timed) -> float:
    """The tuned baseline's time on a seed, its neighbours run right after it: in the same round, on
    the machine as it is then, they show whether its lr is the fastest here."""
    seconds = timed(tuned, seed)[TIME]
    for neighbour in beside:
        timed(neighbour, seed)
    return seconds


def _trial_named(candidates: list, label: str):
    return next(t for t in candidates if f"trial {t.number}" == label)


def _ablation_reference(spec: StudySpec, book: dict[str, Any], tuned: Variant) -> dict[str, Any]:
    """What the winner's methods are ablated against: in a study that searches `lr_factor`, the
    tuned baseline (the book's params at the tuned factor), so that each method alone is measured
    where the race measured the reference, and a method alone at the book's untuned lr, which never
    reaches a target the tuned loop sets, does not spend the whole budget to say so; else the
    book's params."""
    if not searches_lr(spec):
        return book
    return {**book, "lr_factor": _own_factor(spec, book) * tuned.lr_factor}


def _ablation(spec: StudySpec, reference: dict[str, Any], winner: dict[str, Any], timed,
              clock: _RaceClock | None = None, done=lambda variant, seed: False) -> list[str]:
    """Each method the winner changes alone on the reference (_ablation_reference), and the winner
    without it, on the first `ablation_seeds` seeds; returns those methods. Within a budget, the
    ablation stops at the first run that does not fit, saying how many ran."""
    v = spec.verify
    methods = [k for k in spec.space if winner[k] != reference[k]]
    ablation = []
    for k in methods:
        note = v.changes.get(k, "")
        ablation.append(Variant(f"alone: {k}", {**reference, k: winner[k]}, note=note))
        ablation.append(Variant(f"without: {k}", {**winner, k: reference[k]}, note=note))
    planned = [(variant, seed) for seed in v.seeds[:v.ablation_seeds] for variant in ablation]
    for ran, (variant, seed) in enumerate(planned):
        if clock is not None and not done(variant, seed) and not clock.affords([variant.role]):
            clock.log(f"ablation cut: {ran} of {len(planned)} runs (the wall-clock budget left did not hold the next)")
            break
        timed(variant, seed)
    return methods


def _write(name: str, text: str, runs: list[dict[str, Any]], out_dir: Path | None, log,
           cards: str | None = None) -> list[Path]:
    out = Path(out_dir or REPORTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}-verify.md", out / f"{name}-verify.csv"]
    paths[0].write_text(text)
    pd.DataFrame(runs).to_csv(paths[1], index=False)
    if cards is not None:   # one card per method of the winner, beside the race's report
        paths.append(out / f"{name}-cards.md")
        paths[2].write_text(cards)
    log(text)
    log("written: " + ", ".join(str(p) for p in paths))
    return paths


def _candidates(spec: StudySpec, study, baseline_number: int) -> list:
    """The trials the race re-measures: the fastest `[verify] candidates` of the Pareto front (of the
    best trial, with one objective) that reached the target, then the fastest others to fill up."""
    from optuna.trial import TrialState

    done = sorted((t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                   if t.number != baseline_number and t.values and math.isfinite(t.values[0])),
                  key=lambda t: t.values[0])
    front = {t.number for t in (study.best_trials if spec.multi_objective else [study.best_trial])} if done else set()
    ranked = [t for t in done if t.number in front] + [t for t in done if t.number not in front]
    return ranked[:spec.verify.candidates]


def _run(store: Store, experiment_id: str, spec: StudySpec, name: str, scale: str, fixed: dict[str, Any],
         variant: Variant, seed: int, trials, show_progress: bool, log) -> dict[str, Any]:
    values = _values(spec, fixed, variant, seed)
    label = f"verify {variant.role} seed {seed}: " + " ".join(
        spec.space[k].optuna_value(p) if spec.space[k].compound else f"{k}={p}" for k, p in variant.params.items()) \
        + (f" (lr x{variant.lr_factor:g})" if variant.lr_factor != 1.0 else "")
    cell, metrics, run_id = remeasure.measured(store, experiment_id, name, scale, values, label, kind=VERIFY,
                                               tags={ROLE: variant.role}, trials=trials,
                                               show_progress=show_progress, log=log)
    return _row(spec, variant, seed, cell, metrics, run_id)


def _row(spec: StudySpec, variant: Variant, seed: int, cell: Cell, metrics: dict[str, float], run_id: str) -> dict[str, Any]:
    """One run as a row of the CSV. `lr_factor` is the factor over the study's lr: the variant's own
    times the one its params set (a study may search `lr_factor` itself; the params come first so
    that they cannot overwrite the product); `lr` the rate the cell logged it trained with."""
    reached = metrics.get("target_reached") == 1.0
    return {"role": variant.role, "seed": seed, **{k: spec.space[k].optuna_value(p) for k, p in variant.params.items()},
            "lr_factor": variant.lr_factor * _own_factor(spec, variant.params),
            "lr": metrics.get("lr_effective"),   # what the cell trained with, as it logged it
            TIME: metrics.get(TIME, math.inf) if reached else math.inf, "reached": reached,
            "test_accuracy": metrics.get("test_accuracy"), "epochs_to_accuracy": metrics.get("epochs_to_accuracy"),
            "time_to_accuracy_resolution_s": metrics.get("time_to_accuracy_resolution_s") if reached else None,
            "contended": metrics.get("contended"), "changes": variant.note, "mlflow_run_id": run_id}
