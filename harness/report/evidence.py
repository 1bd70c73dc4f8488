"""What kind of evidence a verdict is, so that a PASS on a page says which kind of PASS it is.

A PASS on a book's timing measured on the machine the claim needs is a reproduction; a PASS on a
FLOP count our own code computes, or on a format's bits, could not have come out otherwise. Each
verdict is in one class (`of`), the summaries count them class by class (`count_line`), and a
table's line on a page shows its headline claim (`headline`), a document's claim whenever one was
judged, never a fact shown above an undecided claim.

- book timing: a document's claim on a time, a speed-up, an efficiency or a throughput, measured on
  what the claim needs;
- measured claim: any other document's claim (an accuracy, a share of the time) measured on what
  it needs: the document's data, machine and dtype;
- stand-in: a document's claim measured without something it needs (fewer cores, CPU processes
  for GPUs, JPEG images for the original arrays, bf16 for fp16): labelled whatever its verdict;
- consistency: a check of the measurement itself, true by construction on some machines;
- exact fact: an `exact` check, known before anything is measured (a format's bits, a parameter
  count by construction);
- computed fact: a figure this project's code computes the same way on every run (a FLOP count,
  outputs equal by construction), `claim = "computed"`: no machine's noise can move it;
- project goal: this project's own target, not a document's.
"""

from __future__ import annotations

from collections import Counter

from harness.report.checks import VERDICTS, Judgement, Verdict, is_timing

BOOK_TIMING, MEASURED, STAND_IN = "book timing", "measured claim", "stand-in"
CONSISTENCY, EXACT, COMPUTED, GOAL = "consistency", "exact fact", "computed fact", "project goal"
CLASSES = (BOOK_TIMING, MEASURED, STAND_IN, CONSISTENCY, EXACT, COMPUTED, GOAL)   # the order pages count them in
PLURALS = {BOOK_TIMING: "book timings", MEASURED: "measured claims", STAND_IN: "stand-ins",
           CONSISTENCY: "consistency", EXACT: "exact facts", COMPUTED: "computed facts", GOAL: "project goals"}
# The classes a document's claim is in once measured: a table's headline is one of them when it can be.
CLAIMS = (BOOK_TIMING, MEASURED, STAND_IN)
DECIDED = (Judgement.PASS, Judgement.FAIL, Judgement.DIFFERS)


def of(verdict: Verdict) -> str:
    """The verdict's class (the module's docstring says what each means)."""
    if verdict.claim == "goal":
        return GOAL
    if verdict.claim == "consistency":
        return CONSISTENCY
    if verdict.claim == "computed":
        return COMPUTED
    if verdict.kind == "exact":
        return EXACT
    if verdict.stand_in:
        return STAND_IN
    return BOOK_TIMING if is_timing(verdict.metric) else MEASURED


def count_line(verdicts: list[Verdict]) -> str:
    """The verdicts counted class by class, each class's PASS, FAIL, DIFFERS and inconclusive; the
    N/A (nothing to judge here) counted once at the end."""
    return count_pairs([(of(v), v.verdict) for v in verdicts])


def count_pairs(pairs: list[tuple[str, str]]) -> str:
    """count_line over (class, verdict) pairs, as a verdicts.csv holds them."""
    found: dict[str, Counter] = {c: Counter() for c in CLASSES}
    na = 0
    for klass, verdict in pairs:
        if verdict == Judgement.NA:
            na += 1
        else:
            found[klass][Judgement(verdict)] += 1
    parts = [f"{PLURALS[c]} " + ", ".join(f"{n[k]} {_word(k)}" for k in VERDICTS if n[k])
             for c, n in found.items() if n]
    return "; ".join(parts + [f"{na} N/A"] * bool(na)) or "none"


def _word(verdict: Judgement) -> str:
    return "inconclusive" if verdict == Judgement.INCONCLUSIVE else verdict


def headline(verdicts: list[Verdict]) -> Verdict | None:
    """A table's headline: its first document's claim that was judged here (decided or not), in the
    sweep file's order; else its first judged check of another class (a consistency check, a goal, a
    computed or an exact fact, in that order); else its first document's claim, N/A."""
    judged = [v for v in verdicts if v.verdict != Judgement.NA]
    claims = [v for v in judged if of(v) in CLAIMS]
    if claims:
        return claims[0]
    for kind in (CONSISTENCY, GOAL, COMPUTED, EXACT):
        found = [v for v in judged if of(v) == kind]
        if found:
            return found[0]
    claims = [v for v in verdicts if of(v) in CLAIMS]
    return (claims or verdicts or [None])[0]
