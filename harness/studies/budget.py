"""One wall-clock budget for a study's search and its race together (`harness study NAME --budget 2h`).

A study that decides has to leave time to decide: the race re-measures the best trials over seeds
and ablates the winner, and it costs about as much as the search. So the search stops starting
trials once the time left is what the race needs, then the race runs on what is left:

    budget = search (trials) + race (the tuned loop, the candidates, the ablation)

The race's need is estimated from what the study has measured: the tuned loop's time to the target
(the calibration's, else the baseline trial's), the fastest time a trial reached it in (the
incumbent), the runs the race makes at most (`[verify]`), and the wall clock a run costs over its
training clock (process start, data loading and the accuracy checks, all outside the training
clock) added to each, read off the study's own trials as they finish, and a tenth more for luck.

The budget and the seconds spent are user attributes of the study in its storage: a study killed and
resumed spends only what is left, and `--status` shows the budget, what is spent and the phase. A
trial cut off by a kill is not counted (its seconds were not kept); every finished trial and race
run is, from its own start to its end.

Nothing here imports Optuna or torch: the CLI parses and checks a budget before any heavy import.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from harness.errors import UserError

BUDGET_ATTR = "harness.budget_s"         # study user attribute: the budget, seconds of wall clock
SPENT_ATTR = "harness.budget_spent_s"    # study user attribute: seconds spent (trials and race runs)
PHASE_ATTR = "harness.phase"             # study user attribute: "search", "race" or "done"
WALL_ATTR = "harness.wall_s"             # trial user attribute: its wall clock, start to end
CLOCK_ATTR = "harness.train_s"           # trial user attribute: its training clock

SEARCH, RACE, DONE = "search", "race", "done"
# A run's wall clock outside its training clock (process start, data loading, the accuracy checks)
# before the study has measured its own
FIRST_OVERHEAD_S = 10.0
MARGIN = 1.1                             # the race's estimate, a tenth more: the last run may end past it
MIN_SEEDS_TO_NAME = 3                    # a race cut shorter names no winner

_PART = re.compile(r"(\d+(?:\.\d+)?)(min|h|m|s)?")


def parse(text: str) -> float:
    """'2h', '90m', '1h30m', '45s' or plain seconds ('5400') as seconds; one sentence otherwise."""
    raw = str(text).strip().lower().replace(" ", "")
    parts = list(_PART.finditer(raw))
    if not raw or not parts or "".join(p.group(0) for p in parts) != raw or \
            (len(parts) > 1 and any(p.group(2) is None for p in parts)):
        raise UserError(f"--budget must be a duration like 2h, 90m, 1h30m or 5400s (got {text!r}).")
    unit = {"h": 3600, "m": 60, "min": 60, "s": 1, None: 1}
    seconds = sum(float(p.group(1)) * unit[p.group(2)] for p in parts)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UserError(f"--budget must be more than 0 seconds (got {text!r}).")
    return seconds


def fmt(seconds: float) -> str:
    """Seconds as a reader reads a budget: 2h, 1h12m, 48m, 35s."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 600 and round(seconds) % 60:
        return f"{int(seconds // 60)}m{round(seconds) % 60:02d}s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours and minutes else f"{hours}h" if hours else f"{minutes}m"


@dataclass(frozen=True)
class RaceNeed:
    """What the race costs at most, in runs and estimated seconds of wall clock."""
    tuned_runs: int          # the tuned loop (and its lr neighbours on the first seeds)
    candidate_runs: int      # the candidates, over the race's rounds
    ablation_runs: int       # each of the winner's methods alone and left out, over the ablation's seeds
    seconds: float

    @property
    def runs(self) -> int:
        return self.tuned_runs + self.candidate_runs + self.ablation_runs

    def text(self) -> str:
        return (f"about {fmt(self.seconds)} for {self.runs} runs ({self.tuned_runs} of the tuned loop, "
                f"{self.candidate_runs} of the candidates, {self.ablation_runs} of the ablation)")


def race_need(verify, *, reference_s: float, incumbent_s: float | None, overhead_s: float,
              methods: int, neighbour_runs: int = 0) -> RaceNeed:
    """The race's cost at most: the tuned loop once a round (`verify.seeds`) and `neighbour_runs` more,
    the candidates' runs (`verify.budget`, else every seed each), and the ablation (each of the
    winner's `methods` alone on the tuned loop and left out of the winner, `ablation_seeds` each).
    A tuned-loop run costs `reference_s` of training, a candidate's the incumbent's; an ablation run
    the mean of the two; each `overhead_s` more for what runs outside the clock."""
    rounds = len(verify.seeds)
    candidate_runs = verify.budget if verify.budget is not None else verify.candidates * rounds
    candidate_runs = min(candidate_runs, verify.candidates * rounds)
    tuned_runs = rounds + neighbour_runs
    ablation_runs = 2 * methods * verify.ablation_seeds
    fast = incumbent_s if incumbent_s is not None else reference_s
    seconds = MARGIN * (tuned_runs * (reference_s + overhead_s) + candidate_runs * (fast + overhead_s)
                        + ablation_runs * ((reference_s + fast) / 2 + overhead_s))
    return RaceNeed(tuned_runs, candidate_runs, ablation_runs, seconds)


def neighbour_runs(verify, tunes_lr: bool) -> int:
    """The runs of the tuned lr's two neighbours beside it on the race's first seeds (none without an lr)."""
    return 2 * min(verify.first_seeds, verify.neighbour_seeds) if tunes_lr else 0


def overhead_s(trials) -> float:
    """A run's wall clock outside its training clock, the median over the study's finished trials (the
    first estimate until one has finished). The first trial also pays the fork server's start, so
    the median, not the mean."""
    outside = [t.user_attrs[WALL_ATTR] - t.user_attrs[CLOCK_ATTR] for t in trials
               if t.user_attrs.get(WALL_ATTR) and t.user_attrs.get(CLOCK_ATTR) is not None]
    return max(0.0, statistics.median(outside)) if outside else FIRST_OVERHEAD_S


@dataclass
class Budget:
    """A study's budget, kept in its storage (`study`: an Optuna study, or anything with user_attrs
    and set_user_attr)."""
    study: Any

    @classmethod
    def open(cls, study, seconds: float | None, log) -> "Budget | None":
        """The study's budget: `seconds` when given (a new or changed budget, said so), else the one
        its storage keeps from the run that set it; None when neither has one."""
        had = study.user_attrs.get(BUDGET_ATTR)
        if seconds is None and had is None:
            return None
        if seconds is not None and had is not None and abs(seconds - had) > 0.5:
            log(f"budget changed from {fmt(had)} to {fmt(seconds)}; {fmt(study.user_attrs.get(SPENT_ATTR, 0.0))} "
                "spent so far still counts")
        if seconds is not None:
            study.set_user_attr(BUDGET_ATTR, float(seconds))
        if PHASE_ATTR not in study.user_attrs:
            study.set_user_attr(PHASE_ATTR, SEARCH)
        if SPENT_ATTR not in study.user_attrs:
            study.set_user_attr(SPENT_ATTR, 0.0)
        return cls(study)

    @property
    def total_s(self) -> float:
        return float(self.study.user_attrs[BUDGET_ATTR])

    @property
    def spent_s(self) -> float:
        return float(self.study.user_attrs.get(SPENT_ATTR, 0.0))

    @property
    def left_s(self) -> float:
        return self.total_s - self.spent_s

    @property
    def phase(self) -> str:
        return self.study.user_attrs.get(PHASE_ATTR, SEARCH)

    def spend(self, seconds: float) -> None:
        # one writer: a budgeted study runs in one process (its trials are timed on the cores it holds)
        self.study.set_user_attr(SPENT_ATTR, self.spent_s + max(0.0, seconds))

    def enter(self, phase: str) -> None:
        self.study.set_user_attr(PHASE_ATTR, phase)

    def line(self, need: RaceNeed | None = None) -> str:
        """'budget 2h: 1h12m spent, 48m left; phase: search (the race needs about 31m ...)'."""
        needs = f" (the race needs {need.text()})" if need is not None and self.phase == SEARCH else ""
        return (f"budget {fmt(self.total_s)}: {fmt(self.spent_s)} spent, {fmt(self.left_s)} left; "
                f"phase: {self.phase}{needs}")


def status_line(user_attrs: dict) -> str | None:
    """The budget line --status prints from a study's attributes alone (None without a budget)."""
    if BUDGET_ATTR not in user_attrs:
        return None
    return Budget(SimpleNamespace(user_attrs=user_attrs)).line()   # read only: nothing is set


def check_affords(seconds: float, *, reference_s: float | None, need: RaceNeed | None, overhead: float) -> None:
    """Refuse, in one sentence and before any trial, a budget smaller than one tuned run or than
    the race alone needs."""
    if reference_s is not None and seconds < reference_s + overhead:
        raise UserError(f"a budget of {fmt(seconds)} is smaller than one run of the tuned loop (about "
                        f"{fmt(reference_s + overhead)}: {reference_s:.0f} s to the target, and what runs outside "
                        "its clock); give it more.")
    if need is not None and seconds < need.seconds:
        raise UserError(f"a budget of {fmt(seconds)} is smaller than the race alone needs ({need.text()}); "
                        "give it more, or fewer [verify] seeds or candidates.")
