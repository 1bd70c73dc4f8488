"""The race over seeds (studies/deciding/race.py) on fabricated trials with known noise: it names the true best
more often than the single-draw ranking a search ends with, spends seeds only on candidates that could
still win, and stops at its budget."""

from __future__ import annotations

import math
import random

from harness.studies.deciding.race import median_interval, race, single_draw_pick, uniform_pick

# six recipes' true times to a target (s), the best 12% ahead of the next; each draw is off by a seed's
# multiplicative noise (sd 15%, the spread the in-study figures showed: the luckiest of 24 draws was 1.9x off)
TRUE = {"a": 1.0, "b": 1.12, "c": 1.2, "d": 1.3, "e": 1.45, "f": 1.6}
NOISE = 0.15


def world(n: int):
    """One fabricated study: every (recipe, seed) has one fixed draw, as a rerun of the same cell would."""
    def measure(name: str, seed: int) -> float:
        return TRUE[name] * math.exp(random.Random(f"{n}/{name}/{seed}").gauss(0, NOISE))
    return measure


def test_the_median_interval_is_the_range_for_five_draws_or_fewer_and_narrows_after():
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)
    assert median_interval(list(map(float, range(1, 11)))) == (2.0, 9.0)   # coverage 97.9%; (3, 8) would be 89%
    assert median_interval([1.0, math.inf]) == (1.0, math.inf)            # a missed target stays infinite


def test_seeds_go_only_to_candidates_that_overlap_the_leader_and_a_separated_leader_stops_the_race():
    times = {("fast", 0): 1.0, ("fast", 1): 1.1, ("fast", 2): 1.05, ("close", 0): 1.08, ("close", 1): 1.3,
             ("close", 2): 1.4, ("slow", 0): 3.0, ("slow", 1): 3.2}
    result = race(["slow", "close", "fast"], lambda n, s: times.get((n, s), 2.0), seeds=[0, 1, 2], first=2,
                  reference="tuned")
    assert result.leader == "fast" and not result.separated and result.stop == "the seeds ran out (3)"
    assert result.entrants["slow"].seeds == [0, 1]              # apart from the leader after two seeds
    assert result.entrants["close"].seeds == [0, 1, 2]          # overlapped [1.0, 1.1], so one seed more
    assert result.reference.seeds == [0, 1, 2]                  # the tuned baseline runs in every round
    assert [r[:2] for r in result.runs[:4]] == [("tuned", 0), ("slow", 0), ("close", 0), ("fast", 0)]
    apart = race(["slow", "fast"], lambda n, s: times[n, s], seeds=[0, 1, 2], first=2)
    assert apart.separated and apart.stop == "the leader separated" and apart.candidate_runs == 4


def test_a_race_stops_before_its_budget_and_says_so():
    result = race(["a", "b"], lambda n, s: 1.0, seeds=list(range(10)), first=2, budget=5)
    assert result.candidate_runs == 4 and not result.separated
    assert result.stop == "the budget of 5 candidate runs would be passed by another round"
    assert race(["a", "b"], lambda n, s: 1.0, seeds=[0, 1, 2], first=2).stop == "the seeds ran out (3)"


def test_the_race_names_the_true_best_more_often_than_one_draw_each_and_as_often_as_even_seeds():
    names, worlds = list(TRUE), 400
    raced = single = even = runs = 0
    for n in range(worlds):
        measure = world(n)
        result = race(names, measure, seeds=list(range(10)), first=2, budget=24)
        raced += result.leader == "a"
        runs += result.candidate_runs
        single += single_draw_pick(names, measure, 0) == "a"
        even += uniform_pick(names, measure, [0, 1, 2, 3]) == "a"     # 24 runs, the race's whole budget
    assert runs <= 24 * worlds
    # measured with this seeding: race 78%, one draw each 58%, four seeds each 79% (with 20% more runs)
    assert raced / worlds >= single / worlds + 0.15
    assert raced / worlds >= even / worlds - 0.03 and runs < 0.9 * 24 * worlds


def test_the_race_report_puts_each_in_study_figure_beside_its_re_measured_interval_and_names_the_leader():
    from types import SimpleNamespace

    from harness.specs import study_spec
    from harness.studies.deciding import race_report

    spec = study_spec.load("study_speed_recipe")
    book = {k: spec.space[k].optuna_value(v) for k, v in spec.baseline.params.items()}
    trials = [SimpleNamespace(number=7, values=[0.6], params={**book, "dtype": "bf16"}),     # lucky in the study
              SimpleNamespace(number=9, values=[1.0], params={**book, "batch_size": 128})]
    times = {("trial 7", s): t for s, t in enumerate([1.5, 1.6, 1.4])} | \
            {("trial 9", s): t for s, t in enumerate([1.0, 1.1, 0.9])} | {("tuned baseline", s): 3.0 for s in range(3)}
    result = race(["trial 7", "trial 9"], lambda n, s: times[n, s], seeds=[0, 1, 2], first=2, reference="tuned baseline")
    runs = [{"role": "winner" if n == "trial 9" else n, "seed": s, "time_to_accuracy_s": t,
             "time_to_accuracy_resolution_s": 0.01, "test_accuracy": 0.6} for n, s, t in result.runs]
    fixed = {**spec.fixed("smoke"), "target_from_epoch": 0, "target_accuracy": 0.6, "check_every_samples": 640}
    text = race_report.text(spec, "study_speed_recipe-smoke", "smoke", 0.6, fixed, SimpleNamespace(number=0, values=[4.0]),
                            trials, result, runs, 8.0, [])
    assert result.leader == "trial 9" and result.separated
    assert "Winner, named on the re-measured intervals: **trial 9** (" in text and "overlaps no other" in text
    assert "| trial 7 | 0.6 | 1.55 | 1.5 to 1.6 | 2 | 2/2 | 0.01 | no |" in text     # the lucky draw, outside
    assert "| trial 9 (winner) | 1 | 1.05 | 1 to 1.1 | 2 | 2/2 | 0.01 | yes |" in text   # apart after two seeds
    assert "over the tuned baseline: **2.86x**" in text and "Checked every 640 training samples" in text


def test_the_race_report_says_whether_the_tuned_lr_was_the_fastest_of_its_neighbours_on_this_host():
    from types import SimpleNamespace

    from harness.specs import study_spec
    from harness.studies.deciding import race_report

    spec = study_spec.load("study_speed_recipe")
    book = {k: spec.space[k].optuna_value(v) for k, v in spec.baseline.params.items()}
    trials = [SimpleNamespace(number=9, values=[1.0], params={**book, "batch_size": 128})]
    times = {("trial 9", s): 1.0 + 0.1 * s for s in range(3)} | {("tuned baseline", s): 3.0 for s in range(3)}
    result = race(["trial 9"], lambda n, s: times[n, s], seeds=[0, 1, 2], first=2, reference="tuned baseline")
    fixed = {**spec.fixed("smoke"), "target_from_epoch": 0, "target_accuracy": 0.6}

    def report(below: list[float], above: list[float]) -> str:
        runs = [{"role": "winner" if n == "trial 9" else n, "seed": s, "time_to_accuracy_s": t, "lr_factor": 64.0,
                 "lr": 6.4e-4, "time_to_accuracy_resolution_s": 0.01, "test_accuracy": 0.6} for n, s, t in result.runs]
        for role, factor, seconds in (("tuned lr x/2", 32.0, below), ("tuned lr x2", 128.0, above)):
            runs += [{"role": role, "seed": s, "time_to_accuracy_s": t, "lr_factor": factor, "lr": factor * 1e-5}
                     for s, t in enumerate(seconds)]
        return race_report.text(spec, "study_speed_recipe-smoke", "smoke", 0.6, fixed,
                                SimpleNamespace(number=0, values=[4.0]), trials, result, runs, 64.0, [])

    text = report([3.5, 3.6], [4.0, math.inf])
    assert "## The tuned lr on this host (seeds 0, 1)" in text
    assert "the tuned lr, x64, was the fastest of the three" in text
    table = text.split("## The tuned lr on this host")[1].split("## The race")[0]
    rows = ["| tuned lr x/2 | 32 |", "| tuned baseline | 64 |", "| tuned lr x2 | 128 |"]   # by lr factor
    assert [table.index(row) for row in rows] == sorted(table.index(row) for row in rows)
    assert "| 0: 4, 1: not reached | not reached |" in table     # a miss is slower than any time, at its median
    text = report([3.5, 3.6], [2.0, 2.5])                       # the host's fastest is x128: said, not hidden
    assert "**x128 was faster than the tuned lr, x64, on this host**" in text
    assert "over the tuned baseline: **2.86x**" in text        # still formed against the tuned factor alone (3 / 1.05)
    assert "The tuned lr on this host" not in race_report.text(  # no neighbours ran (airbench): no section
        spec, "s", "smoke", 0.6, fixed, SimpleNamespace(number=0, values=[4.0]), trials, result,
        [{"role": "winner" if n == "trial 9" else n, "seed": s, "time_to_accuracy_s": t} for n, s, t in result.runs],
        64.0, [])
