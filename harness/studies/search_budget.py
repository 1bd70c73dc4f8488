"""A budgeted study's search: when to stop starting trials so that the race fits in what is left
(studies/budget.py keeps the budget; this reads the study's trials and its calibration to size the race).

The search stops before a trial when the time left, less what the race needs, is less than a trial
costs (the median wall clock of the trials so far; before any, the tuned loop's run). The race's
need is re-estimated before every trial from the study's own figures: its incumbent (a faster one
makes the candidates' runs cheaper), the winner's likely methods (the incumbent's, each ablated
twice) and the wall clock its trials have cost outside their training clock.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from harness.specs.study_spec import StudySpec
from harness.studies import baseline as study_baseline, budget, incumbent
from harness.studies.budget import Budget, RaceNeed


@dataclass
class SearchBudget:
    """The budget of one study's search, with what the race it leaves room for needs."""
    spec: StudySpec
    study: Any
    kept: Budget
    calibrated_s: float | None     # the calibration's tuned loop, seconds to the target (None: not calibrated)
    tuned: dict[str, Any]          # the tuned loop's params (the race's reference and the ablation's)

    def reference_s(self) -> float | None:
        """The tuned loop's seconds to the target: the calibration's, else the baseline trial's own."""
        if self.calibrated_s is not None:
            return self.calibrated_s
        base = study_baseline.finished(self.study)
        if base is not None and base.values and math.isfinite(base.values[0]):
            return float(base.values[0])
        return None

    def need(self, trials) -> RaceNeed | None:
        """What the race needs, from the study's `trials` so far (None before its reference time is known)."""
        reference = self.reference_s()
        if reference is None:
            return None
        best = incumbent.incumbent(self.study)
        return budget.race_need(self.spec.verify, reference_s=reference, incumbent_s=best[1] if best else None,
                                overhead_s=budget.overhead_s(trials), methods=self._methods(best),
                                neighbour_runs=budget.neighbour_runs(self.spec.verify, "lr_factor" in self.spec.space))

    def _methods(self, best: tuple[int, float] | None) -> int:
        """The methods the winner is likely to have: the incumbent's, where it differs from the tuned
        loop (half the space before there is one)."""
        if best is None:
            return max(1, len(self.spec.space) // 2)
        params = self.study.trials[best[0]].params
        return max(1, sum(params.get(k) != self.spec.space[k].optuna_value(v) for k, v in self.tuned.items()
                          if k in self.spec.space))

    def trial_cost_s(self, trials) -> float | None:
        """What the next trial is likely to cost: the median wall clock of the `trials` so far."""
        walls = [t.user_attrs[budget.WALL_ATTR] for t in trials
                 if t.user_attrs.get(budget.WALL_ATTR) and not t.user_attrs.get(study_baseline.BASELINE_ATTR)]
        if walls:
            return statistics.median(walls)
        reference = self.reference_s()
        return None if reference is None else reference + budget.overhead_s(trials)

    def stop_search(self) -> str | None:
        """Why no further trial starts (None: one may)."""
        if self.kept.phase != budget.SEARCH:
            return f"the search is over (phase: {self.kept.phase})"
        trials = self.study.get_trials(deepcopy=False)   # read once: each trial's storage is read here
        need, cost = self.need(trials), self.trial_cost_s(trials)
        if need is None or cost is None:   # the baseline trial comes first and sizes the race
            return None if self.kept.left_s > 0 else "the budget is spent"
        if self.kept.left_s - need.seconds < cost:
            return (f"{budget.fmt(self.kept.left_s)} of the budget left and the race needs {need.text()}; a trial "
                    f"costs about {budget.fmt(cost)}")
        return None

    def spend(self, seconds: float) -> None:
        self.kept.spend(seconds)
