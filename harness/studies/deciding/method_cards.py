"""Method cards: one per method of a raced study's winner, generated from the race and the ablation
(studies/deciding/verify.py), written beside the race's report as `<study>-cards.md`.

Composer keeps a card per speed method, written by hand from its GPU runs. Ours are measured on the
host the race ran on: what the method changes (the model, the optimizer, the arithmetic, the data,
the loss, or only how fast a step runs), and two figures, each paired by seed:

- **alone**: the tuned loop's time to the target over the tuned loop with that one method added
  (above 1: the method alone is faster);
- **in the winner**: the winner without the method over the winner (above 1: leaving it out of the
  stack slows it; below 1: the stack is faster without it).

Each is the median of the per-seed ratios with the order-statistic interval of that median (the range
of five seeds or fewer); a run that missed the target makes its ratio 0 (alone) or +inf (left out).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from harness.studies.deciding.race import median_interval

TIME = "time_to_accuracy_s"
WINNER = "winner"


def paired_ratios(slow: dict[int, float], fast: dict[int, float]) -> list[float]:
    """slow / fast at each seed both ran (a missed target is +inf: inf/x = inf, x/inf = 0)."""
    ratios = []
    for seed in sorted(set(slow) & set(fast)):
        a, b = slow[seed], fast[seed]
        ratios.append(math.inf if math.isinf(a) and not math.isinf(b) else 0.0 if math.isinf(b) else a / b)
    return ratios


def _by_seed(runs: list[dict[str, Any]], role: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[TIME]) for r in runs if r["role"] == role}


def _figure(ratios: list[float]) -> str:
    if not ratios:
        return "not measured (the ablation was cut before it)"
    lo, hi = median_interval(ratios)
    return (f"**{_x(statistics.median(ratios))}** (interval {_x(lo)} to {_x(hi)}, {len(ratios)} seed"
            f"{'s' * (len(ratios) > 1)})")


def _x(value: float) -> str:
    return "not reached" if value == 0 else "inf" if math.isinf(value) else f"{value:.3g}x"


def card(method: str, value: Any, runs: list[dict[str, Any]], reference: str, changes: str) -> str:
    """One method's card from the race's rows."""
    tuned, winner = _by_seed(runs, reference), _by_seed(runs, WINNER)
    alone = paired_ratios(tuned, _by_seed(runs, f"alone: {method}"))
    left_out = paired_ratios(_by_seed(runs, f"without: {method}"), winner)
    return "\n".join([
        f"### `{method}` = {value}", "",
        f"- **What it changes:** {changes or 'only how fast a step runs (the same arithmetic, model and data)'}",
        f"- **Alone, on the {reference}:** {_figure(alone)} the {reference}'s speed to the target",
        f"- **In the winner:** leaving it out takes {_figure(left_out)} the winner's time", ""])


def cards(methods: list[str], winner_params: dict[str, Any], runs: list[dict[str, Any]], reference: str,
          changes_of: Callable[[str], str], *, title: str, host: str) -> str:
    """Every method's card, under a heading naming the study and the host they were measured on."""
    head = [f"# Method cards: {title}", "", f"Measured on {host}, from the race and the ablation of the winner "
            "(the CSV beside the race's report holds every run). Ratios are paired by seed; an interval is the "
            "order-statistic interval of the median (the range of five seeds or fewer).", ""]
    if not methods:
        return "\n".join(head + ["The winner changes nothing from the reference: no card.", ""])
    return "\n".join(head) + "\n".join(card(m, winner_params.get(m), runs, reference, changes_of(m)) for m in methods)
