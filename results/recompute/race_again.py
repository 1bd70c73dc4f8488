"""A study's race read again without the harness: the figures harness/studies/deciding/race.py and
race_report.py print, written once for every study folder's recompute.py (standard library only)."""
import math


def fmt(v):
    """As the race page prints a time or a ratio: 'not reached' for a target never reached."""
    return "not reached" if math.isinf(v) else f"{v:.3g}"


def order_interval(values):
    """The order-statistic 95% interval of the median: [x_(j), x_(n-j+1)] for the largest j whose
    coverage 1 - 2 P(Binomial(n, 1/2) < j) is still 95% (the range when none is)."""
    xs, j, below = sorted(values), 1, 0.0
    for k in range(1, len(xs) // 2 + 1):
        below += math.comb(len(xs), k - 1) / 2 ** len(xs)
        if 1 - 2 * below < 0.95:
            break
        j = k
    return xs[j - 1], xs[len(xs) - j]


def ratio(a, b):
    """a / b for times where +inf is a target never reached: 0 when b never arrives."""
    return 0.0 if math.isinf(b) else math.inf if math.isinf(a) else a / b
