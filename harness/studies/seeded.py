"""Seeds in the objective: `seeds_per_trial = N` in a study file runs each trial's parameters N times,
seeds s, s+1, ... (s: the fixed `seed`, 0 unless set), and tells Optuna the median of each objective.

A recipe's time to a target moves with the seed by a whole check interval, so a sampler learning from
one seed a trial learns the luck of that seed as much as the recipe. Each seed is its own cell and
MLflow run under the study's parent run (the trial's tag on each); the trial's value is the median
over its seeds (a seed that missed the target counts as the worst value, so a recipe that misses on
most seeds is not reached), and the spread is stored on the trial as the user attribute
`harness.seeds`: the seeds, each objective's per-seed values with their min, median and max, and the
runs. The sampler's pruner reads the first seed's epochs only; a seed that fails or is pruned ends
the trial as that seed ended.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from harness.cells import CellResult
from harness.errors import UserError
from harness.specs.cell_spec import Cell
from harness.specs.study_spec import NOT_REACHED, StudySpec
from harness.store import Outcome

SEEDS_ATTR = "harness.seeds"                 # trial user attribute: the spread over its seeds
COUNT_ATTR = "harness.seeds_per_trial"       # study user attribute: the seeds every trial runs
Objective = Callable[[str, str, dict[str, float]], "float | None"]


def check_study(study, seeds: int) -> None:
    """A study's trials are valued over one number of seeds: a file changed after trials ran is refused."""
    had = study.user_attrs.get(COUNT_ATTR)
    if had is None and not study.get_trials(deepcopy=False):
        study.set_user_attr(COUNT_ATTR, seeds)
    elif (had or 1) != seeds:
        raise UserError(f"study '{study.study_name}' valued its trials over {had or 1} seed(s) and its file now asks "
                        f"for {seeds}; give the study another --storage, or restore seeds_per_trial.")


def run_seeds(spec: StudySpec, seeds: int, cell: Cell, run: Callable[[Cell, bool], CellResult],
              objective: Objective) -> tuple[CellResult, dict[str, Any]]:
    """Run `cell` once per seed (`run(cell, first)`); the result to tell Optuna (metrics: each
    objective's median, every other metric's median over the seeds that report it) and the spread."""
    if seeds == 1:
        return run(cell, True), {}
    first = int(cell.values.get("seed", 0))
    results = []
    for seed in range(first, first + seeds):
        result = run(Cell.build({**cell.values, "seed": seed}, f"{cell.label} seed {seed}"), seed == first)
        if result.outcome != Outcome.OK:
            return result, {}
        results.append(result)
    merged = _medians([r.metrics for r in results])
    spread: dict[str, Any] = {"seeds": list(range(first, first + seeds)),
                              "runs": [r.run_id for r in results]}
    for metric, direction in zip(spec.metrics, spec.directions):
        values = [objective(metric, direction, r.metrics) for r in results]
        if any(v is None for v in values):
            merged.pop(metric, None)   # the engine says which metric the experiment did not return
            continue
        middle = statistics.median(values)
        spread[metric] = {"values": values, "min": min(values), "median": middle, "max": max(values)}
        flag = NOT_REACHED.get(metric)
        if math.isfinite(middle):
            merged[metric] = middle
            if flag:
                merged[flag] = 1.0
        else:   # the median seed missed the target: the trial did
            merged.pop(metric, None)
            if flag:
                merged[flag] = 0.0
    return CellResult(cell, Outcome.OK, merged, None, results[0].run_id), spread


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for metrics in runs for k, v in metrics.items() if isinstance(v, (int, float))}
    return {k: statistics.median(m[k] for m in runs if k in m) for k in sorted(keys)}
