"""A target that ranks: a study's target accuracy measured by the harness from a reference run, not guessed.

A target the reference loop reaches at its first check makes every fast recipe tie at one or two
checks. A study file with a `[target]` section instead times its trials to "the best test accuracy
the tuned baseline reaches within E epochs, less a margin", found once per scale by

    harness study NAME --calibrate-target --scale S     (make study-NAME-calibrate SCALE=S)

which runs, each in a fresh process and resumably (studies/deciding/remeasure.py):

1. the [baseline]'s params at the study's lr times each of `[verify] lr_factors` (and x1), `epochs`
   epochs on the first seed, every check on the whole test set; the factor with the best accuracy
   sets the target (an experiment without an lr of its own, airbench, has x1 only). While the best
   is the grid's top factor, the grid doubles past it (at most `lr_doublings` times): a best at the
   edge is only a lower bound on the best lr;
2. that factor on the other `seeds`: the target is the median of their best accuracies less
   `margin`. The target is an accuracy: it does not depend on the host;
3. that factor once more (the clock run), timed to the target with a check every few steps: its
   training samples to the target set the fine clock, a check every `resolution` of them
   (check_every_samples, whole steps of each run's own batch, so a recipe with a bigger batch is
   resolved as finely), on a probe of `probe_size` test images (time_to_accuracy.AccuracyWatch);
4. the tuned lr, by time: the best-accuracy factor and its neighbours in the doubling grid (half and
   twice its lr), each timed to the target on the fine clock over `seeds`, seed by seed. The best
   accuracy within E epochs is not the fastest way to an accuracy below it (a larger lr can get there
   sooner and end lower), and a speed study compares recipes by time. The tuned factor is the one
   with the lowest median time (a run that does not reach the target counts as slower than any that
   does); while it is the highest or lowest factor timed, the next doubling or halving is timed too,
   at most `lr_doublings` more, so that it ends with a slower neighbour on both sides (else the file's
   `lr_at_grid_edge` is true and the log says so). A tuned baseline short of tuned flatters every
   recipe raced against it.

The result is `results/targets/<study>-<scale>.json`, committed beside the study's results: the
target, the factor that set it, every timed factor's seconds on each seed and their medians, the
tuned lr factor and its neighbours, the fine clock's settings, the machine and every run behind
them. `reference_time_to_target_s` is the tuned factor's median over `seeds` on that machine: a time
belongs to its host, so the race measures the tuned baseline (and its neighbours, beside it on its
first seeds) again on its own. Every trial, the baseline trial included, and every run of the race is
timed to the target; with `give_up_after = k` each stops short once it has trained k times the
reference's seconds without reaching it (a trial that slow cannot win; its remaining epochs would
only say by how much). A scale the section does not list keeps the [baseline]'s own target
(target_from_epoch); a listed scale without its file is refused, in one sentence, before anything runs
(the trials read the file through studies/trial_target.py).

The timing runs of step 4 serve that step alone. They cannot stand in for the accuracy runs of steps
1-2 (those set the target the timing runs stop at), nor for the race's tuned baseline (the race
measures it interleaved with the candidates, on its host, to the study's epoch budget and give-up
cap), and the clock run (3.) could be the best-accuracy factor's first timing run only if every
timing run checked as often as it does, which costs more checks than the one run it saves.
"""

from __future__ import annotations

import json
import math
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.errors import UserError
from harness.specs.study_spec import StudySpec
from harness.studies import trial_target

if TYPE_CHECKING:
    from harness.store import Store

CALIBRATE = "calibrate"
FIRST_CHECKS = 200                   # the clock run (3.) checks this many times over the epochs at most


def check_calibrates(spec: StudySpec, scale: str) -> None:
    """--calibrate-target at a scale the [target] does not list is one sentence, asked before
    anything is loaded."""
    if spec.baseline is None or not trial_target.calibrated_at(spec, scale):
        listed = ", ".join(spec.target.epochs) if spec.target else "none"
        raise UserError(f"study file {spec.shown} calibrates no target at scale {scale}: it needs a [baseline] and "
                        f"a [target] whose epochs list the scale (listed: {listed}).")


def calibrate(spec: StudySpec, store: "Store", *, scale: str, overrides: dict[str, Any], show_progress: bool = False,
              log=print) -> Path:
    """Run the reference (the module's steps 1-4) and write the target file; returns its path."""
    from experiments import make_config
    from harness.cells import preflight
    from harness.machine.fingerprint import FINGERPRINT, fingerprint, machine_text
    from harness.studies import isolation

    check_calibrates(spec, scale)
    fixed = {**spec.fixed(scale, overrides), "target_from_epoch": 0, "epochs": spec.target.epochs[scale],
             "stop_at_target": False, "target_accuracy": 1.0}   # never met: every check of every epoch is read
    preflight([make_config(fixed)])
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    trials = isolation.runner(isolation.PROCESS)
    try:
        reference = _Reference(spec, store, experiment_id, spec.study_name(scale, overrides), scale, trials,
                               show_progress, log)
        best, accuracies = reference.best_accuracies(fixed)
        goal = round(statistics.median(accuracies) - spec.target.margin, 4)
        clock = reference.fine_clock(fixed, best, goal)
        timed = reference.fastest_to_target(fixed, best, goal, clock["check_every_samples"])
    finally:
        trials.close()
    here = fingerprint()
    found = {"study": spec.name, "scale": scale, "target_accuracy": goal,
             "best_accuracy_median": statistics.median(accuracies), "margin": spec.target.margin,
             "within_epochs": spec.target.epochs[scale], "best_accuracy_lr_factor": best * reference.own,
             "best_accuracy_at_grid_edge": reference.lr_grid.at_edge, **clock, "resolution": spec.target.resolution,
             "probe_size": spec.target.probe_size,
             **_tuned_fields(timed, reference.own, reference.has_lr, spec.target.seeds), "overrides": overrides,
             "host": socket.gethostname(),
             # every run above is this machine's (remeasure reuses no other machine's runs)
             "fingerprint": here[FINGERPRINT], "machine": machine_text(here),
             "measured": reference.measured(), "runs": reference.runs}
    return _write(spec, scale, found, log)


@dataclass
class LrGrid:
    accuracies: dict[float, float]  # lr factor -> the best test accuracy on the first seed
    doublings: int                  # factors tried past the configured grid's top
    best: float                     # the factor with the best accuracy (the smaller on a tie)
    at_edge: bool                   # the best factor is still the top one tried: a better lr may lie above it


def grown_grid(accuracy_at: Callable[[float], float], factors: list[float], doublings: int) -> LrGrid:
    """Step 1: the lr factors' best accuracies, the grid doubled past its top while the top is the best.

    A best at the grid's top edge says only that the best lr is at least that large: a target set
    there can be short of the best accuracy the loop reaches, and step 4 starts its timing from a
    factor below the fast ones. So while the top factor is the best, the next doubling is run too, at
    most `doublings` times; a factor that diverges (chance accuracy, or none) ends the growth as any
    lower accuracy does."""
    accuracies = {f: _accuracy_or_none(accuracy_at(f)) for f in sorted(factors)}

    def best_now() -> float:
        return max(accuracies, key=lambda f: (accuracies[f], -f))

    grown = 0
    while best_now() == max(accuracies) and grown < doublings:
        top = max(accuracies) * 2
        accuracies[top] = _accuracy_or_none(accuracy_at(top))
        grown += 1
    best = best_now()
    return LrGrid(accuracies, grown, best, at_edge=len(accuracies) > 1 and best == max(accuracies))


def _accuracy_or_none(accuracy: float | None) -> float:
    """A diverged run's accuracy (NaN, or none logged) ranks below every real one."""
    return -1.0 if accuracy is None or math.isnan(accuracy) else float(accuracy)


def lr_neighbours(factor: float) -> tuple[float, float]:
    """The factors beside one in the doubling grid: half its lr and twice it."""
    return factor / 2, factor * 2


@dataclass
class TimedGrid:
    times: dict[float, list[float]]   # lr factor -> training seconds to the target, a seed each (+inf: not reached)
    doublings: int                    # factors timed past the first ones (each a doubling or a halving)
    tuned: float                      # the lowest median time (the smaller factor on a tie)
    at_edge: bool                     # the tuned factor is still the highest or lowest timed: a faster lr may be beyond

    def median(self, factor: float) -> float:
        return statistics.median(self.times[factor])


def fastest_lr(time_at: Callable[[float, int], float | None], best: float, seeds: list[int], doublings: int, *,
               neighbours: bool = True) -> TimedGrid:
    """Step 4: the lr factor with the lowest median time to the target over `seeds`, timed outward from
    `best` (the factor with the best accuracy) until it has a slower neighbour on both sides.

    `time_at(factor, seed)` runs one and returns its seconds, None when it did not reach the target
    (+inf here: slower than any run that did; the median ranks by order, so a factor that missed on
    one seed of three has the slower of its other two as its median). `best` and its neighbours run seed by seed, so
    that a drift of the machine falls on each alike. While the fastest is the highest (lowest) factor
    timed, the next doubling (halving) is timed on every seed, at most `doublings` times; a fastest
    that is not reached at its median stops the growth (there is nothing to be faster than). Without
    `neighbours` (an experiment with no lr of its own) only `best` is timed."""
    times: dict[float, list[float]] = {}

    def time_each(factors: list[float]) -> None:
        for seed in seeds:
            for factor in factors:
                times.setdefault(factor, []).append(_seconds_or_inf(time_at(factor, seed)))

    low, high = lr_neighbours(best)
    time_each([low, best, high] if neighbours else [best])
    grown = 0
    while (beyond := _beyond_edge(times)) is not None and grown < doublings:
        time_each([beyond])
        grown += 1
    return TimedGrid(times, grown, _fastest(times), at_edge=_beyond_edge(times) is not None)


def _fastest(times: dict[float, list[float]]) -> float:
    return min(times, key=lambda f: (statistics.median(times[f]), f))


def _beyond_edge(times: dict[float, list[float]]) -> float | None:
    """The factor to time next: past the fastest when it is the highest or lowest timed, else None."""
    fastest = _fastest(times)
    if len(times) < 2 or math.isinf(statistics.median(times[fastest])):
        return None
    low, high = lr_neighbours(fastest)
    return high if fastest == max(times) else low if fastest == min(times) else None


def _seconds_or_inf(seconds: float | None) -> float:
    return math.inf if seconds is None or math.isnan(seconds) else float(seconds)


class _Reference:
    """The calibration's runs of the study's baseline, each in a fresh process and reused when it
    finished before (studies/deciding/remeasure.py), kept as rows for the target file."""

    def __init__(self, spec: StudySpec, store: "Store", experiment_id: str, name: str, scale: str, trials,
                 show_progress: bool, log) -> None:
        import experiments
        from harness.studies.deciding.variants import own_factor

        self.spec, self.store, self.experiment_id, self.name, self.scale = spec, store, experiment_id, name, scale
        self.trials, self.show_progress, self.log = trials, show_progress, log
        # the [baseline]'s params are [space] values already (a compound choice as its table, not a
        # trial's stored label)
        self.book = dict(spec.baseline.params)
        self.own = own_factor(spec, self.book)     # the lr factor the baseline's params set themselves
        self.has_lr = "lr" in experiments.get(spec.experiment).reads   # airbench sets its own: x1 only
        self.runs: list[dict[str, Any]] = []
        self.lr_grid: LrGrid | None = None

    def run(self, factor: float, seed: int, values: dict[str, Any], step: str,
            needs: str = "best_test_accuracy") -> dict[str, float]:
        """One run of the book loop at an lr factor; `needs`: the metric its step reads (a run timed on the
        probe has a whole-set accuracy only if a crossing was confirmed, so a timing run needs its verdict)."""
        from harness.studies.deciding import remeasure
        from harness.studies.deciding.variants import Variant, values_of

        config = values_of(self.spec, values, Variant(f"lr x{factor:g}", self.book, factor), seed)
        _, metrics, run_id = remeasure.measured(
            self.store, self.experiment_id, self.name, self.scale, config, f"calibrate {step}: lr x{factor:g} seed {seed}",
            kind=CALIBRATE, tags={}, trials=self.trials, show_progress=self.show_progress, log=self.log)
        if needs not in metrics:
            raise UserError(f"the calibration's reference run (lr x{factor:g}, seed {seed}) ended without "
                            f"{needs}; see MLflow run {run_id}.")
        self.runs.append({"step": step, "lr_factor": factor * self.own, "seed": seed,
                          **{k: metrics.get(k) for k in ("best_test_accuracy", "time_to_accuracy_s",
                                                        "epochs_to_accuracy", "train_samples")},
                          "mlflow_run_id": run_id})
        return metrics

    def measured(self) -> str:
        """When the runs behind the target started (first to last), not when the file was written: a
        calibration resumed later reuses them."""
        from harness.store.tracking import KIND

        ids = {r["mlflow_run_id"] for r in self.runs}
        starts = sorted(r.start_time for r in self.store.runs(self.experiment_id, tags={KIND: CALIBRATE})
                        if r.run_id in ids)
        ends = [starts[0], starts[-1]] if len(starts) > 1 else starts
        return " to ".join(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000)) for ms in ends)

    def best_accuracies(self, fixed: dict[str, Any]) -> tuple[float, list[float]]:
        """Steps 1-2: the lr factor (over the baseline's own) with the best accuracy on the first seed,
        and its best accuracy on every seed."""
        seeds = self.spec.target.seeds
        factors = sorted({1.0, *map(float, self.spec.verify.lr_factors)}) if self.has_lr else [1.0]
        grid = grown_grid(lambda f: self.run(f, seeds[0], fixed, "lr")["best_test_accuracy"], factors,
                          self.spec.target.lr_doublings if self.has_lr else 0)
        if grid.at_edge:
            self.log(f"  the best-accuracy lr factor, x{grid.best:g}, is still the grid's top after "
                     f"{grid.doublings} doubling(s): the target may be short of the best accuracy (raise [target] "
                     "lr_doublings)")
        self.lr_grid = grid
        best = grid.best
        others = [self.run(best, s, fixed, "seed")["best_test_accuracy"] for s in seeds[1:]]
        return best, [grid.accuracies[best], *others]

    def fine_clock(self, fixed: dict[str, Any], best: float, goal: float) -> dict[str, Any]:
        """Step 3: the best-accuracy factor timed to the goal with a check every 1/FIRST_CHECKS of its
        budget, on the probe; a check every `resolution` of its training samples to the goal is the fine
        clock (set before the tuned factor is known: step 4 times every factor on this one clock)."""
        from experiments import make_config
        from harness.studies.deciding.variants import Variant, values_of

        target = self.spec.target
        config = make_config(values_of(self.spec, fixed, Variant("", self.book), 0))   # its own epochs and batch
        per_epoch = self.runs[0]["train_samples"]
        first_every = max(config.batch_size, int(per_epoch * config.epochs) // FIRST_CHECKS)
        timed = self.run(best, target.seeds[0], {**fixed, "target_accuracy": goal, "stop_at_target": True,
                                                  "check_every_samples": first_every,
                                                  "probe_size": target.probe_size}, "time", needs="target_reached")
        if timed.get("target_reached") != 1.0:
            raise UserError(f"the best-accuracy lr factor did not reach its own calibrated target {goal:.4g} again; "
                            "raise [target] margin.")
        samples = timed["epochs_to_accuracy"] * per_epoch
        return {"check_every_samples": max(config.batch_size, int(target.resolution * samples)),
                "samples_to_target": samples}

    def fastest_to_target(self, fixed: dict[str, Any], best: float, goal: float, every: int) -> TimedGrid:
        """Step 4: the best-accuracy factor and its neighbours timed to the goal on the fine clock over
        the seeds, grown until the fastest has a slower neighbour on both sides (fastest_lr)."""
        target = self.spec.target
        timing = {**fixed, "target_accuracy": goal, "stop_at_target": True, "check_every_samples": every,
                  "probe_size": target.probe_size}

        def seconds_at(factor: float, seed: int) -> float | None:
            metrics = self.run(factor, seed, timing, "speed", needs="target_reached")
            return metrics.get("time_to_accuracy_s") if metrics.get("target_reached") == 1.0 else None

        grid = fastest_lr(seconds_at, best, target.seeds, target.lr_doublings if self.has_lr else 0,
                          neighbours=self.has_lr)
        if math.isinf(grid.median(grid.tuned)):
            raise UserError(f"no lr factor of the book loop reached the calibrated target {goal:.4g} on most of the "
                            f"seeds {target.seeds}; raise [target] margin.")
        if grid.at_edge:
            self.log(f"  the fastest lr factor to the target, x{grid.tuned:g}, is still at the edge of those timed "
                     f"after {grid.doublings} more: the tuned baseline may be short of the best lr (raise [target] "
                     "lr_doublings)")
        return grid


def _tuned_fields(grid: TimedGrid, own: float, has_lr: bool, seeds: list[int]) -> dict[str, Any]:
    """Step 4 in the target file: the tuned factor, its neighbours and every timed factor's seconds
    (None: not reached), in the study's lr factors (`own`, the factor the baseline's params set,
    times the grid's)."""
    def shown(seconds: float) -> float | None:
        return None if math.isinf(seconds) else seconds

    return {"lr_factor": grid.tuned * own,
            "lr_neighbours": [f * own for f in lr_neighbours(grid.tuned)] if has_lr else [],
            "lr_at_grid_edge": grid.at_edge, "lr_timing_doublings": grid.doublings,
            "reference_time_to_target_s": shown(grid.median(grid.tuned)),
            "reference_time_to_target_is": f"the median of lr x{grid.tuned * own:g}'s training seconds to "
                                           f"the target over seeds {', '.join(map(str, seeds))}, on this machine",
            "lr_times_to_target": [{"lr_factor": f * own, "seeds": seeds,
                                    "time_to_target_s": [shown(s) for s in grid.times[f]],
                                    "median_s": shown(grid.median(f))} for f in sorted(grid.times)]}


def _write(spec: StudySpec, scale: str, found: dict[str, Any], log) -> Path:
    where = trial_target.path(spec, scale)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(found, indent=1, default=str) + "\n")
    target = spec.target
    log(f"target for {spec.name} at scale {scale}: test accuracy {found['target_accuracy']:.4g} (median best "
        f"{found['best_accuracy_median']:.4g} of {spec.baseline.name} at lr x{found['best_accuracy_lr_factor']:g} "
        f"within {found['within_epochs']} epoch(s), less {target.margin:g}); a check every "
        f"{found['check_every_samples']} training samples ({target.resolution:.0%} of its "
        f"{found['samples_to_target']:.0f} to it)"
        + (f" on a probe of {target.probe_size} test images" if target.probe_size else "") + "\n"
        + _tuned_line(found) + f"\nwritten: {where}")
    return where


def _tuned_line(found: dict[str, Any]) -> str:
    """`tuned lr: x64, median 44.7 s to the target (x32 54.5 s, x128 82.5 s; seeds 0, 1, 2)`."""
    def median(row: dict[str, Any]) -> str:
        return "not reached" if row["median_s"] is None else f"{row['median_s']:.3g} s"

    rows = {row["lr_factor"]: row for row in found["lr_times_to_target"]}
    tuned = rows[found["lr_factor"]]
    others = ", ".join(f"x{f:g} {median(row)}" for f, row in rows.items() if f != found["lr_factor"])
    edge = "; still at the edge of the factors timed" if found["lr_at_grid_edge"] else ""
    return (f"tuned lr (the fastest to the target): x{found['lr_factor']:g}, median {median(tuned)}"
            + (f" ({others}" if others else " (") + f"; seeds {', '.join(map(str, tuned['seeds']))}){edge}")
