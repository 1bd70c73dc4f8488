"""How large a sweep or a study is, said before it starts. Past LARGE_RUNS cells or trials, or
LARGE_EPOCHS epochs in all, a job first says how large it is (a 100,000-cell grid or 10^9 epochs
from a typo would otherwise just start); past its cap (--max-cells, --max-trials) it is refused in
one sentence before anything is created or run.

Epochs are counted per run: the ranks of one run (world_size) train their epochs side by side, so
they do not make the job longer and are not multiplied in. A study's cap counts the study's trials
(its --n-trials target), however many workers or Slurm jobs share them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import UserError

if TYPE_CHECKING:
    from harness.specs.sweep_job import SweepJob

# Past these a job is large: it says how large before anything runs.
LARGE_RUNS, LARGE_EPOCHS = 1_000, 100_000


@dataclass(frozen=True)
class JobSize:
    """What one invocation would run, in the words its messages use."""
    kind: str           # "sweep" or "study"
    name: str
    scale: str
    runs: int           # its cells, or its study's trials
    unit: str           # "cells" or "trials"
    epochs: int         # every run's epochs added up
    cap_option: str     # the option capping `runs`: "--max-cells" or "--max-trials"
    narrow: str         # how to make the job smaller, said when the cap refuses it
    at_most: bool = False  # `epochs` is a bound: a study's trials may be pruned or sample fewer


def check_cap(option: str, cap: int) -> None:
    """A cap below 1 would refuse every job: one sentence, before the job is even read."""
    if cap < 1:
        raise UserError(f"{option} must be at least 1 (got {cap}).")


def announce(size: JobSize, cap: int) -> None:
    """Refuse a job of more runs than `cap`; say how large a large one is before it starts."""
    check_cap(size.cap_option, cap)
    if size.runs > cap:
        raise UserError(f"{size.kind} {size.name} at scale {size.scale} has {size.runs} {size.unit}, more than "
                        f"{size.cap_option} {cap}; {size.narrow} or raise {size.cap_option}.")
    if size.runs > LARGE_RUNS or size.epochs > LARGE_EPOCHS:
        epochs = f"{'at most ' if size.at_most else ''}{size.epochs} epochs in all"
        print(f"harness: {size.kind} {size.name} ({size.scale}) is a large job: {size.runs} {size.unit}, {epochs}; "
              f"Ctrl-C stops it (finished {size.unit} are kept) and {size.cap_option} caps it.",
              file=sys.stderr, flush=True)


def check_sweep_count(spec, scale: str, overrides: dict[str, Any], cap: int) -> None:
    """Refuse a grid of more cells than `cap` on its count alone, before a cell is built (building
    and validating every cell's config first made the refusal wait on the very size it refuses)."""
    from harness.specs.sweep_spec import cell_count

    count = cell_count(spec, scale, overrides)
    if count > cap:
        announce(_sweep_size(spec.name, scale, count, 0), cap)


def sweep_size(job: SweepJob) -> JobSize:
    """A sweep's cells and their epochs, as its job (specs/sweep_job.py) holds them."""
    epochs = sum(getattr(config, "epochs", 0) or 0 for config in job.configs())
    return _sweep_size(job.spec.name, job.scale, len(job.cells), epochs)


def _sweep_size(name: str, scale: str, cells: int, epochs: int) -> JobSize:
    return JobSize("sweep", name, scale, cells, "cells", epochs, "--max-cells", "narrow the grid (--set AXIS=[...])")


def study_size(spec, scale: str, overrides: dict[str, Any], n_trials: int | None) -> JobSize:
    """A study's target of trials (`n_trials`, else the file's at `scale`), each counted at the most
    epochs a trial may train: the fixed epochs, or the top of a searched `epochs`."""
    from experiments import make_config

    target = n_trials or spec.trials_at(scale)
    per_trial = max([getattr(make_config(spec.fixed_for_checks(scale, overrides)), "epochs", 0) or 0,
                     *searched_epochs(spec)])
    return JobSize("study", spec.name, scale, target, "trials", target * per_trial, "--max-trials",
                   "ask for fewer (--n-trials N)", at_most=True)


def searched_epochs(spec) -> list[int]:
    """The epochs a study's [space] can set, at the ends of each range (a compound choice too)."""
    found = []
    for param in spec.space.values():
        for value in param.extremes():
            epochs = param.fields(value).get("epochs")
            if isinstance(epochs, (int, float)) and not isinstance(epochs, bool):
                found.append(int(epochs))
    return found
