"""A target that ranks: a study's target accuracy measured by the harness from a reference run, not guessed.

A target the reference loop reaches at its first check makes every fast recipe tie at one or two
checks. A study file with a `[target]` section instead times its trials to "the best test accuracy
the tuned baseline reaches within E epochs, less a margin", found once per scale by

    harness study NAME --calibrate-target --scale S     (make study-NAME-calibrate SCALE=S)

which runs, each in a fresh process and resumably (studies/remeasure.py):

1. the [baseline]'s params at the study's lr times each of `[verify] lr_factors` (and x1), `epochs`
   epochs on the first seed, every check on the whole test set; the factor with the best accuracy is
   the tuned baseline (an experiment without an lr of its own, airbench, has x1 only). While the best
   is the grid's top factor, the grid doubles past it (at most `lr_doublings` times): a best at the
   edge is only a lower bound on the tuned lr, and a baseline short of tuned flatters every recipe;
2. the tuned baseline on the other `seeds`: the target is the median of their best accuracies less
   `margin`;
3. the tuned baseline once more, timed to that target with a check every few steps: its training
   samples to the target set the fine clock, a check every `resolution` of them (check_every_samples,
   whole steps of each run's own batch, so a recipe with a bigger batch is resolved as finely), on a
   probe of `probe_size` test images (time_to_accuracy.AccuracyWatch).

The result is `results/targets/<study>-<scale>.json`, committed beside the study's results: the
target, the tuned lr factor, the fine clock's settings and every run behind them. Every trial, the
baseline trial included, and every run of the race is timed to it; with `give_up_after = k` each
stops short once it has trained k times the reference's seconds without reaching it (a trial that
slow cannot win; its remaining epochs would only say by how much). A scale the section does not list
keeps the [baseline]'s own target (target_from_epoch); a listed scale without its file is refused,
in one sentence, before anything runs.
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

from harness import folders
from harness.errors import UserError

from harness.specs.study_spec import StudySpec

if TYPE_CHECKING:
    from harness.store import Store

CALIBRATE = "calibrate"
ATTR = "harness.calibrated_target"   # study user attribute: the target its trials were timed to
FIRST_CHECKS = 200                   # the timing run (3.) checks this many times over the epochs at most


def path(spec: StudySpec, scale: str) -> Path:
    return folders.TARGETS_DIR / f"{spec.name}-{scale}.json"


def calibrated_at(spec: StudySpec, scale: str) -> bool:
    return spec.target is not None and scale in spec.target.epochs


def check_calibrates(spec: StudySpec, scale: str) -> None:
    """--calibrate-target at a scale the [target] does not list is one sentence, asked before
    anything is loaded."""
    if spec.baseline is None or not calibrated_at(spec, scale):
        listed = ", ".join(spec.target.epochs) if spec.target else "none"
        raise UserError(f"study file {spec.shown} calibrates no target at scale {scale}: it needs a [baseline] and "
                        f"a [target] whose epochs list the scale (listed: {listed}).")


def read(spec: StudySpec, scale: str) -> dict[str, Any] | None:
    """The calibration of a listed scale; None for a scale the [target] does not list."""
    if not calibrated_at(spec, scale):
        return None
    where = path(spec, scale)
    if not where.exists():
        name = spec.name.removeprefix("study_")
        raise UserError(f"study {spec.name} at scale {scale} is timed to a calibrated target and {where} does not "
                        f"exist; run `harness study {name} --calibrate-target --scale {scale}` (make study-"
                        f"{name.replace('_', '-')}-calibrate SCALE={scale}) first.")
    return json.loads(where.read_text())


def applied(spec: StudySpec, scale: str, fixed: dict[str, Any]) -> dict[str, Any]:
    """The fixed settings with the calibrated target and fine clock (unchanged at other scales)."""
    found = read(spec, scale)
    if found is None:
        return fixed
    applied = {**fixed, "target_from_epoch": 0, "target_accuracy": found["target_accuracy"],
               "check_every_samples": found["check_every_samples"], "probe_size": found["probe_size"]}
    if spec.target.give_up_after and found.get("reference_time_to_target_s"):
        # seconds of the calibration's machine: on one up to `give_up_after` times slower, a trial is
        # still cut only once it is slower than the tuned baseline there, which no winner is
        applied["give_up_after_s"] = round(spec.target.give_up_after * found["reference_time_to_target_s"], 1)
    return applied


def tuned_factor(spec: StudySpec, scale: str) -> float | None:
    """The tuned baseline's lr factor (over the study's lr) the calibration found, if it ran."""
    found = read(spec, scale)
    return None if found is None else float(found["lr_factor"])


def check_study(study, fixed: dict[str, Any]) -> None:
    """A study's trials are timed to one target: a calibration redone after trials ran is refused."""
    if not fixed.get("target_accuracy") or not fixed.get("check_every_samples"):
        return
    now = {k: fixed[k] for k in ("target_accuracy", "check_every_samples", "probe_size")}
    if fixed.get("give_up_after_s"):   # a study from before the cap existed compares without it
        now["give_up_after_s"] = fixed["give_up_after_s"]
    had = study.user_attrs.get(ATTR)
    if had is None:
        study.set_user_attr(ATTR, now)
    elif had != now:
        raise UserError(f"study '{study.study_name}' was timed to {had} and its target file now says {now}; "
                        "give the recalibrated study another --storage, or restore the file.")


def calibrate(spec: StudySpec, store: "Store", *, scale: str, overrides: dict[str, Any], show_progress: bool = False,
              log=print) -> Path:
    """Run the reference (the module's steps 1-3) and write the target file; returns its path."""
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
        tuned, accuracies = reference.best_accuracies(fixed)
        goal = round(statistics.median(accuracies) - spec.target.margin, 4)
        clock = reference.fine_clock(fixed, tuned, goal)
    finally:
        trials.close()
    here = fingerprint()
    found = {"study": spec.name, "scale": scale, "target_accuracy": goal,
             "best_accuracy_median": statistics.median(accuracies), "margin": spec.target.margin,
             "within_epochs": spec.target.epochs[scale], "lr_factor": tuned * reference.own,
             "lr_at_grid_edge": reference.lr_grid.at_edge, **clock,
             "probe_size": spec.target.probe_size, "overrides": overrides, "host": socket.gethostname(),
             # every run above is this machine's (remeasure reuses no other machine's runs)
             "fingerprint": here[FINGERPRINT], "machine": machine_text(here),
             "measured": reference.measured(), "runs": reference.runs}
    return _write(spec, scale, found, log)


@dataclass
class LrGrid:
    best: dict[float, float]    # lr factor -> the best test accuracy on the first seed
    doublings: int              # factors tried past the configured grid's top
    tuned: float                # the factor with the best accuracy (the smaller on a tie)
    at_edge: bool               # the tuned factor is still the top one tried: the best lr may lie above it


def grown_grid(accuracy_at: Callable[[float], float], factors: list[float], doublings: int) -> LrGrid:
    """The lr factors' best accuracies, the grid doubled past its top while the top is the best.

    A best at the grid's top edge says only that the best lr is at least that large: a tuned baseline
    chosen there can be short of tuned, and every recipe then looks faster against it than it is. So
    while the top factor is the best, the next doubling is run too, at most `doublings` times; a factor
    that diverges (chance accuracy, or none) ends the growth as any lower accuracy does."""
    best = {f: _accuracy_or_none(accuracy_at(f)) for f in sorted(factors)}

    def tuned_now() -> float:
        return max(best, key=lambda f: (best[f], -f))

    grown = 0
    while tuned_now() == max(best) and grown < doublings:
        top = max(best) * 2
        best[top] = _accuracy_or_none(accuracy_at(top))
        grown += 1
    tuned = tuned_now()
    return LrGrid(best, grown, tuned, at_edge=len(best) > 1 and tuned == max(best))


def _accuracy_or_none(accuracy: float | None) -> float:
    """A diverged run's accuracy (NaN, or none logged) ranks below every real one."""
    return -1.0 if accuracy is None or math.isnan(accuracy) else float(accuracy)


class _Reference:
    """The calibration's runs of the study's baseline, each in a fresh process and reused when it
    finished before (studies/remeasure.py), kept as rows for the target file."""

    def __init__(self, spec: StudySpec, store: "Store", experiment_id: str, name: str, scale: str, trials,
                 show_progress: bool, log) -> None:
        from harness.studies.variants import own_factor

        self.spec, self.store, self.experiment_id, self.name, self.scale = spec, store, experiment_id, name, scale
        self.trials, self.show_progress, self.log = trials, show_progress, log
        # the [baseline]'s params are [space] values already (a compound choice as its table, not a
        # trial's stored label)
        self.book = dict(spec.baseline.params)
        self.own = own_factor(spec, self.book)     # the lr factor the baseline's params set themselves
        self.runs: list[dict[str, Any]] = []
        self.lr_grid: LrGrid | None = None

    def run(self, factor: float, seed: int, values: dict[str, Any], step: str) -> dict[str, float]:
        from harness.studies import remeasure
        from harness.studies.variants import Variant, values_of

        config = values_of(self.spec, values, Variant(f"lr x{factor:g}", self.book, factor), seed)
        _, metrics, run_id = remeasure.measured(
            self.store, self.experiment_id, self.name, self.scale, config, f"calibrate {step}: lr x{factor:g} seed {seed}",
            kind=CALIBRATE, tags={}, trials=self.trials, show_progress=self.show_progress, log=self.log)
        if "best_test_accuracy" not in metrics:
            raise UserError(f"the calibration's reference run (lr x{factor:g}, seed {seed}) ended without an "
                            f"accuracy; see MLflow run {run_id}.")
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
        import experiments

        seeds = self.spec.target.seeds
        has_lr = "lr" in experiments.get(self.spec.experiment).reads
        factors = sorted({1.0, *map(float, self.spec.verify.lr_factors)}) if has_lr else [1.0]
        grid = grown_grid(lambda f: self.run(f, seeds[0], fixed, "lr")["best_test_accuracy"], factors,
                          self.spec.target.lr_doublings if has_lr else 0)
        if grid.at_edge:
            self.log(f"  the best lr factor, x{grid.tuned:g}, is still the grid's top after {grid.doublings} "
                     "doubling(s): the tuned baseline may be short of the best lr (raise [target] lr_doublings)")
        self.lr_grid = grid
        tuned = grid.tuned
        return tuned, [grid.best[tuned]] + [self.run(tuned, s, fixed, "seed")["best_test_accuracy"] for s in seeds[1:]]

    def fine_clock(self, fixed: dict[str, Any], tuned: float, goal: float) -> dict[str, Any]:
        """Step 3: the tuned baseline timed to the goal with a check every 1/FIRST_CHECKS of its budget,
        on the probe; a check every `resolution` of its training samples to the goal is the fine clock."""
        from experiments import make_config
        from harness.studies.variants import Variant, values_of

        target = self.spec.target
        config = make_config(values_of(self.spec, fixed, Variant("", self.book), 0))   # its own epochs and batch
        per_epoch = self.runs[0]["train_samples"]
        first_every = max(config.batch_size, int(per_epoch * config.epochs) // FIRST_CHECKS)
        timed = self.run(tuned, target.seeds[0], {**fixed, "target_accuracy": goal, "stop_at_target": True,
                                                  "check_every_samples": first_every,
                                                  "probe_size": target.probe_size}, "time")
        if timed.get("target_reached") != 1.0:
            raise UserError(f"the tuned baseline did not reach its own calibrated target {goal:.4g} again; "
                            "raise [target] margin.")
        samples = timed["epochs_to_accuracy"] * per_epoch
        return {"check_every_samples": max(config.batch_size, int(target.resolution * samples)),
                "samples_to_target": samples, "reference_time_to_target_s": timed.get("time_to_accuracy_s")}


def _write(spec: StudySpec, scale: str, found: dict[str, Any], log) -> Path:
    where = path(spec, scale)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(found, indent=1, default=str) + "\n")
    target = spec.target
    log(f"target for {spec.name} at scale {scale}: test accuracy {found['target_accuracy']:.4g} (median best "
        f"{found['best_accuracy_median']:.4g} of {spec.baseline.name} at lr x{found['lr_factor']:g} within "
        f"{found['within_epochs']} epoch(s), less {target.margin:g}); a check every {found['check_every_samples']} "
        f"training samples ({target.resolution:.0%} of its {found['samples_to_target']:.0f} to it)"
        + (f" on a probe of {target.probe_size} test images" if target.probe_size else "") + f"\nwritten: {where}")
    return where
