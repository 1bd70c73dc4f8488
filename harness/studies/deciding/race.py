"""A race over seeds: the study's top candidates re-measured until the leader stands apart.

One in-study measurement per trial ranks recipes by luck as much as by speed: the fastest of 24
single draws is often the luckiest one. Before a winner is named, the candidates (the Pareto front
or the best k) are measured again, each draw a fresh process with another seed, in rounds:

1. every candidate (and the reference, the tuned baseline, interleaved with them) runs the first
   `first` seeds;
2. the leader is the candidate with the lowest median; a candidate stays in the race only while the
   interval of its median still overlaps the leader's (successive halving over seeds: seeds go only
   to the candidates that could still be the best);
3. the leader and the candidates left run one more seed each, until no candidate overlaps the
   leader (it has separated), the seeds run out, or the next round would pass the budget of runs.

With a wall-clock budget (`affordable`, asked before every round with the names about to run), the
race is cut when the next round does not fit: it says so ("race cut: 3 of 5 seeds"), and a race cut
before its leader has `MIN_SEEDS` seeds names no winner.

The interval of a median is the distribution-free one from order statistics (the binomial
interval): with five values or fewer it is their whole range, so a candidate leaves only when every
draw of it was slower than every draw of the leader. A run that missed the target counts as +inf.
Nothing here runs a process: `measure(name, seed)` does (verify.py); the simulation in the
tests calls this same function with fabricated noise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

LEVEL = 0.95
MIN_SEEDS = 3   # a race cut by the clock names a winner only on at least this many seeds


def median_interval(values: list[float], level: float = LEVEL) -> tuple[float, float]:
    """The order-statistic interval of the median: [x_(j), x_(n-j+1)] for the largest j whose
    coverage 1 - 2 P(Binomial(n, 1/2) < j) is still at least `level` (j = 1, the range, when none is)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.inf, math.inf
    j, below = 1, 0.0
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2 ** n      # P(Binomial(n, 1/2) <= k - 1)
        if 1 - 2 * below < level:
            break
        j = k
    return xs[j - 1], xs[n - j]


@dataclass
class Entrant:
    name: str
    seeds: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)    # +inf: the run missed the target

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else math.inf

    @property
    def interval(self) -> tuple[float, float]:
        return median_interval(self.times)


@dataclass
class RaceResult:
    entrants: dict[str, Entrant]          # every candidate, by name, with its draws
    reference: Entrant | None             # the tuned baseline, interleaved, never a winner
    leader: str                           # the lowest re-measured median
    separated: bool                       # its interval overlaps no other candidate's
    stop: str                             # why the race ended, in words
    runs: list[tuple[str, int, float]]    # (name, seed, time) in the order they ran
    cut: bool = False                     # the wall-clock budget ended it before its rounds were done

    @property
    def named(self) -> bool:
        """Whether the race names a winner: always, unless it was cut before its leader had MIN_SEEDS seeds."""
        return not self.cut or len(self.entrants[self.leader].times) >= MIN_SEEDS

    @property
    def candidate_runs(self) -> int:
        return sum(len(e.times) for e in self.entrants.values())


def overlaps(a: Entrant, b: Entrant) -> bool:
    (alo, ahi), (blo, bhi) = a.interval, b.interval
    return alo <= bhi and blo <= ahi


def leader_of(entrants: dict[str, Entrant]) -> Entrant:
    """The lowest median; a tie goes to the candidate listed first (the study's own order)."""
    return min(entrants.values(), key=lambda e: e.median)


def contenders(entrants: dict[str, Entrant]) -> list[Entrant]:
    """The candidates that could still be the best: the leader and every one overlapping it."""
    lead = leader_of(entrants)
    return [e for e in entrants.values() if e is lead or overlaps(e, lead)]


def race(candidates: list[str], measure: Callable[[str, int], float], *, seeds: list[int], first: int = 2,
         budget: int | None = None, reference: str | None = None,
         affordable: Callable[[list[str], int], bool] | None = None) -> RaceResult:
    """Race `candidates` (names, in the study's order) over `seeds`; `budget` caps the candidates'
    runs (the reference's are not counted). `measure(name, seed)` returns a time, +inf if missed.
    `affordable(names, seed)` says whether a round of those runs on that seed still fits the
    wall-clock budget (a run already finished, reused on a resume, costs none of it)."""
    if not candidates:
        raise ValueError("a race needs at least one candidate")
    first = max(1, min(first, len(seeds)))
    entrants = {name: Entrant(name) for name in candidates}
    ref = Entrant(reference) if reference is not None else None
    runs: list[tuple[str, int, float]] = []
    budget = budget if budget is not None else len(candidates) * len(seeds)

    def draw(entrant: Entrant, seed: int) -> None:
        time = float(measure(entrant.name, seed))
        entrant.seeds.append(seed)
        entrant.times.append(time)
        runs.append((entrant.name, seed, time))

    def fits(round_: list[Entrant], seed: int) -> bool:
        return affordable is None or affordable([e.name for e in round_], seed)

    used, stop, cut = 0, "", False
    for seed in seeds[:first]:
        round_ = ([ref] if ref else []) + list(entrants.values())
        if not fits(round_, seed):
            cut = True
            break
        for entrant in round_:
            draw(entrant, seed)
        used += len(entrants)
    for seed in seeds[first:] if not cut else []:
        running = contenders(entrants)
        if len(running) == 1:
            break
        if used + len(running) > budget:
            stop = f"the budget of {budget} candidate runs would be passed by another round"
            break
        round_ = ([ref] if ref else []) + running
        if not fits(round_, seed):
            cut = True
            break
        for entrant in round_:
            draw(entrant, seed)
        used += len(running)
    if cut:
        most = max(len(e.times) for e in entrants.values())
        stop = f"race cut: {most} of {len(seeds)} seeds (the wall-clock budget left did not hold another round)"
    running = contenders(entrants)
    separated = len(running) == 1 and len(entrants) > 1
    if not stop:
        stop = "the leader separated" if separated or len(entrants) == 1 else f"the seeds ran out ({len(seeds)})"
    return RaceResult(entrants, ref, leader_of(entrants).name, separated, stop, runs, cut)


def single_draw_pick(candidates: list[str], measure: Callable[[str, int], float], seed: int) -> str:
    """What a search without a race names: the lowest of one draw each."""
    return min(candidates, key=lambda name: measure(name, seed))


def uniform_pick(candidates: list[str], measure: Callable[[str, int], float], seeds: list[int]) -> str:
    """The same seeds for every candidate, the lowest median named (a race's budget spread evenly)."""
    return min(candidates, key=lambda name: statistics.median(measure(name, s) for s in seeds))
