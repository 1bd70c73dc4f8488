"""`harness study NAME --verify`: the study's best recipe re-timed so that its claim stands on more
than one in-study measurement.

For a study with a baseline that sets the target (the speed-recipe study), every run below is timed
to that same target, within the same epoch budget, each in a fresh process (the fork server of
studies/isolation.py), interleaved:

1. the tuned-lr baseline: the baseline's loop at the study's lr times each of `[verify] lr_factors`
   (and x1) on the first seed; the fastest to the target is the tuned baseline;
2. the best recipe (the fastest complete trial to the target), the baseline (the book's lr) and the
   tuned baseline, once per seed: the share that reaches the target and the median time with a
   bootstrap interval; the best recipe's speed-up over each baseline, with its interval;
3. an ablation on the first `ablation_seeds` seeds: each method of the best recipe alone on the
   baseline, and the recipe with each one left out; a method that changes more than speed (the
   model, the optimizer) is labelled so (`[verify.changes]`).

Each run is an MLflow run of the study's experiment (tag harness.kind = verify); a run already
finished with the same config is reused, so the command resumes where it was cut off. The report
(<study>-verify.md and .csv, every run) goes beside the study's.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import experiments
from experiments import make_config
from harness.cells import preflight, run_cell
from harness.specs.cell_spec import Cell
from harness.errors import UserError
from harness.folders import REPORTS_DIR
from harness.store import Outcome, Store
from harness.store.tracking import CELL_ID, KIND, SCALE
from harness.studies import baseline as study_baseline, isolation
from harness.studies.study_storage import open_study
from harness.studies.trial_tags import STUDY
from harness.studies.study_report import markdown
from harness.specs.study_spec import StudySpec

VERIFY = "verify"
ROLE = "harness.verify_role"    # tag: which part of the verification a run is (best, baseline, tuned, ...)
TIME = "time_to_accuracy_s"
RESAMPLES = 2000


@dataclass
class Variant:
    role: str                     # "best", "baseline", "tuned", "lr x2", "alone: dtype", "without: dtype"
    params: dict[str, Any]        # a value for each [space] parameter
    lr_factor: float = 1.0
    note: str = ""                # what it changes beyond speed


def bootstrap_median(values: list[float], *, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (a target not reached counts as +inf)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def bootstrap_ratio(slow: list[float], fast: list[float], *, resamples: int = RESAMPLES,
                    seed: int = 0) -> tuple[float, float]:
    """95% interval of median(slow) / median(fast), each group resampled on its own."""
    rng = random.Random(seed)
    ratios = sorted(_ratio(statistics.median(rng.choices(slow, k=len(slow))),
                           statistics.median(rng.choices(fast, k=len(fast)))) for _ in range(resamples))
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def _ratio(a: float, b: float) -> float:
    if math.isinf(b):
        return 0.0
    return math.inf if math.isinf(a) else a / b


def run_verify(spec: StudySpec, store: Store, db_url: str, *, scale: str, overrides: dict[str, Any],
               out_dir: Path | None = None, show_progress: bool = False, log=print) -> list[Path]:
    name = spec.study_name(scale, overrides)
    study, base, best, target = _best_of(spec, name, db_url)
    fixed = {**spec.fixed(scale, overrides), "target_from_epoch": 0, "target_accuracy": target}
    book = _params(spec, base.params)
    recipe = _params(spec, best.params)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    preflight([make_config(fixed)])
    runs: list[dict[str, Any]] = []
    trials = isolation.runner(isolation.PROCESS)
    try:
        def timed(variant: Variant, seed: int) -> dict[str, Any]:
            row = _run(store, experiment_id, spec, name, scale, fixed, variant, seed, trials, show_progress, log)
            runs.append(row)
            return row

        tuned_factor = _tuned_factor(spec, book, timed)
        methods = _seeds_and_ablation(spec, book, recipe, tuned_factor, timed)
    finally:
        trials.close()
    text = _report(spec, name, scale, target, base, best, fixed, runs, tuned_factor, methods, list(spec.verify.seeds))
    return _write(name, text, runs, out_dir, log)


def _best_of(spec: StudySpec, name: str, db_url: str):
    """The study, its baseline trial, its best trial and the target they were timed to; one
    sentence when the study cannot be verified (yet)."""
    if spec.baseline is None or not spec.targets_from_baseline or spec.metrics[0] != TIME:
        raise UserError(f"study {spec.name} has no baseline that sets a target for {TIME}; --verify re-times "
                        "a time-to-accuracy study's best trial against its baseline.")
    study = open_study(spec, name, db_url, create=False)
    base, target = study_baseline.finished(study), study_baseline.target(study)
    if base is None or target is None:
        raise UserError(f"study {name} has no complete baseline trial yet; run the study first.")
    best = _best_trial(study, base.number)
    if best is None:
        raise UserError(f"study {name} has no complete trial that reached the target {target:.4g}; nothing to verify.")
    return study, base, best, target


def _tuned_factor(spec: StudySpec, book: dict[str, Any], timed) -> float:
    """The baseline re-timed at each lr factor (first seed); the fastest to the target is the tuned
    baseline's factor, relative to the factor the baseline's own params set."""
    # An experiment with no lr to scale (airbench sets its own) has no tuned baseline: x1 only.
    has_lr = "lr" in experiments.get(spec.experiment).reads
    factors = sorted({1.0, *map(float, spec.verify.lr_factors)}) if has_lr else [1.0]
    search = [timed(Variant(f"lr x{f:g}", book, f), spec.verify.seeds[0]) for f in factors]
    reached = [r for r in search if r["reached"]]
    return min(reached, key=lambda r: r[TIME])["lr_factor"] / _own_factor(spec, book) if reached else 1.0


def _seeds_and_ablation(spec: StudySpec, book: dict[str, Any], recipe: dict[str, Any], tuned_factor: float,
                        timed) -> list[str]:
    """The baseline, the tuned baseline and the best recipe over every seed, then each method the
    recipe changes alone and left out; returns those methods."""
    v = spec.verify
    for seed in v.seeds:
        for variant in (Variant("baseline", book), Variant("tuned baseline", book, tuned_factor), Variant("best", recipe)):
            timed(variant, seed)
    methods = [k for k in spec.space if recipe[k] != book[k]]
    ablation = []
    for k in methods:
        note = v.changes.get(k, "")
        ablation.append(Variant(f"alone: {k}", {**book, k: recipe[k]}, note=note))
        ablation.append(Variant(f"without: {k}", {**recipe, k: book[k]}, note=note))
    for seed in v.seeds[:v.ablation_seeds]:
        for variant in ablation:
            timed(variant, seed)
    return methods


def _write(name: str, text: str, runs: list[dict[str, Any]], out_dir: Path | None, log) -> list[Path]:
    out = Path(out_dir or REPORTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}-verify.md", out / f"{name}-verify.csv"]
    paths[0].write_text(text)
    pd.DataFrame(runs).to_csv(paths[1], index=False)
    log(text)
    log("written: " + ", ".join(str(p) for p in paths))
    return paths


def _own_factor(spec: StudySpec, params: dict[str, Any]) -> float:
    """The lr factor a variant's params set themselves (a study that searches `lr_factor`), else 1."""
    return float(params.get("lr_factor", 1.0)) if "lr_factor" in spec.space else 1.0


def _best_trial(study, baseline_number: int):
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.number != baseline_number and t.values and math.isfinite(t.values[0])]
    return min(done, key=lambda t: t.values[0]) if done else None


def _params(spec: StudySpec, stored: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as [space] values (a compound choice back from its label)."""
    return {k: spec.space[k].from_label(v) if spec.space[k].compound else v for k, v in stored.items()}


def _values(spec: StudySpec, fixed: dict[str, Any], variant: Variant, seed: int) -> dict[str, Any]:
    values = dict(fixed)
    for k, value in variant.params.items():
        values.update(spec.space[k].fields(value))
    values["seed"] = seed
    if variant.lr_factor != 1.0:
        config = make_config(values)
        if hasattr(config, "lr_factor"):   # the same field a study trial sets: the same run is the same cell
            values["lr_factor"] = config.lr_factor * variant.lr_factor
        else:
            values["lr"] = config.lr * variant.lr_factor
    return values


def _run(store: Store, experiment_id: str, spec: StudySpec, name: str, scale: str, fixed: dict[str, Any],
         variant: Variant, seed: int, trials, show_progress: bool, log) -> dict[str, Any]:
    values = _values(spec, fixed, variant, seed)
    label = f"verify {variant.role} seed {seed}: " + " ".join(
        spec.space[k].optuna_value(p) if spec.space[k].compound else f"{k}={p}" for k, p in variant.params.items()) \
        + (f" (lr x{variant.lr_factor:g})" if variant.lr_factor != 1.0 else "")
    cell = Cell.build(values, label)
    tags = {STUDY: name, SCALE: scale, KIND: VERIFY, ROLE: variant.role}
    done = [r for r in store.runs(experiment_id, tags={STUDY: name, KIND: VERIFY, CELL_ID: cell.cell_id})
            if r.finished_ok]
    if done:
        metrics, run_id = done[0].metrics, done[0].run_id
        log(f"  {label}: reused run {run_id}")
    else:
        result = run_cell(store, experiment_id, cell, tags=tags, show_epochs=show_progress, execute=trials.execute)
        if result.outcome != Outcome.OK:
            log(f"  {label}: {result.outcome}: {result.reason}")
        metrics, run_id = result.metrics, result.run_id
        shown = f"{metrics[TIME]:.4g} s" if TIME in metrics else "not reached"
        log(f"  {label}: {shown}")
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
            "contended": metrics.get("contended"), "changes": variant.note, "mlflow_run_id": run_id}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r[TIME] for r in rows]
    lo, hi = bootstrap_median(times)
    return {"runs": len(rows), "reached": sum(r["reached"] for r in rows), "median": statistics.median(times),
            "lo": lo, "hi": hi, "times": times}


def _fmt(v: float) -> str:
    return "not reached" if math.isinf(v) else f"{v:.3g}"


def _fmt_speedup(x: float) -> str:
    """A speed-up over a baseline; 0 means the recipe did not reach the target (its time is +inf)."""
    if x == 0:
        return "none (the recipe did not reach the target)"
    return "not reached by the baseline" if math.isinf(x) else f"{x:.3g}x"


def _report(spec, name, scale, target, base, best, fixed, runs, tuned_factor, methods, seeds) -> str:
    by_role: dict[str, list[dict]] = {}
    for r in runs:
        by_role.setdefault(r["role"], []).append(r)
    budget = make_config(fixed).epochs
    epoch = spec.baseline.target_epoch(scale)
    lines = [f"# {spec.title}: the best trial re-timed", "",
             f"Study `{name}` at scale **{scale}**. Target: test accuracy **{target:.4g}**, what {spec.baseline.name} "
             f"(trial {base.number}) reached at the end of epoch {epoch}, its budget; the same target for every "
             f"trial and every run below, each given at most {budget} epoch(s). Every run is a fresh process "
             "(forked from a server that had imported torch and run nothing), interleaved; time to the target "
             "counts training steps only.", "",
             f"Best trial: {best.number} ({_methods(spec, best.params)}), {best.values[0]:.4g} s in the study.", ""]
    search = [r for role, rs in by_role.items() if role.startswith("lr x") for r in rs]
    lines += [f"## The tuned-lr baseline (seed {seeds[0]})", "",
              f"{spec.baseline.name} at lr x factor; the fastest to the target is the tuned baseline: "
              f"**lr x{tuned_factor:g}**.", "",
              markdown(pd.DataFrame([{"lr factor": r["lr_factor"], "lr": r["lr"], "time to target s": r[TIME],
                                      "test accuracy": r["test_accuracy"]} for r in search])), ""]
    summary = {role: _summary(by_role[role]) for role in ("baseline", "tuned baseline", "best")}
    lines += _seeds_section(summary, seeds, best)
    ablation = [r for role, rs in by_role.items() if role.startswith(("alone:", "without:")) for r in rs]
    if methods:
        tuned_median = summary["tuned baseline"]["median"]
        lines += ["## Ablation", "", f"Methods of the best recipe: {', '.join(methods)}. Speed-up: over the tuned "
                  "baseline's median.", "",
                  markdown(pd.DataFrame([{"variant": r["role"], "seed": r["seed"], "time to target s": r[TIME],
                                          "speedup": _fmt_speedup(_ratio(tuned_median, r[TIME])),
                                          "test accuracy": r["test_accuracy"],
                                          "changes": r["changes"] or "speed only"} for r in ablation])), ""]
    lines.append(f"*Written by `harness study {spec.name.removeprefix('study_')} --verify --scale {scale}`; "
                 "every run is in the CSV beside this file and in MLflow (tag harness.kind = verify).*")
    return "\n".join(lines) + "\n"


def _seeds_section(summary: dict[str, dict], seeds: list[int], best) -> list[str]:
    """The three main runs over the seeds, the best recipe's speed-ups with their intervals, and
    whether the goal is met."""
    table = [{"run": role, "seeds": s["runs"], "reached target": f"{s['reached']}/{s['runs']}",
              "median s": s["median"], "95% interval s": f"{_fmt(s['lo'])} to {_fmt(s['hi'])}"}
             for role, s in summary.items()]
    lines = [f"## Seeds {', '.join(map(str, seeds))}", "", markdown(pd.DataFrame(table)), ""]
    fast = summary["best"]["times"]
    for role in ("tuned baseline", "baseline"):
        slow = summary[role]["times"]
        lo, hi = bootstrap_ratio(slow, fast)
        lines.append(f"- best recipe over the {role}: **{_fmt_speedup(_ratio(statistics.median(slow), statistics.median(fast)))}** "
                     f"(95% bootstrap interval {_fmt(lo)}x to {_fmt(hi)}x; 0x: a resample whose median did not reach the target)")
    tuned_lo, _ = bootstrap_ratio(summary["tuned baseline"]["times"], fast)
    tuned_x = _ratio(summary["tuned baseline"]["median"], summary["best"]["median"])
    every = summary["best"]["reached"] == summary["best"]["runs"]
    verdict = "MET" if tuned_x >= 2 and tuned_lo > 1.5 and every else "NOT MET"
    return lines + ["", f"Goal (at least 2x the tuned baseline, interval's lower bound above 1.5x, every seed reaching the "
                        f"target): **{verdict}** ({_fmt_speedup(tuned_x)}, lower bound {_fmt(tuned_lo)}x, "
                        f"{summary['best']['reached']}/{summary['best']['runs']} seeds reached).",
                    f"In the study the best trial took {best.values[0]:.4g} s; in fresh processes "
                    + ("its median run did not reach the target" if math.isinf(summary["best"]["median"])
                       else f"its median is {_fmt(summary['best']['median'])} s") + ".", ""]


def _methods(spec: StudySpec, params: dict[str, Any]) -> str:
    """`dtype=bf16, execution=eager, world_size=1 threads=0`: a choice that sets fields of its own (a dict,
    or the study's label of one, "world_size=1 threads=0") shows them, not its own key again."""
    def shown(key: str, value: Any) -> str:
        if isinstance(value, dict):
            return " ".join(f"{k}={v}" for k, v in value.items())
        return str(value) if "=" in str(value) else f"{key}={value}"

    return ", ".join(shown(k, v) for k, v in params.items())
