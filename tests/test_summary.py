"""The terminal summary of a sweep: rounded as the report rounds, with the report's notes."""

from harness.cells import CellResult
from harness.specs.cell_spec import Cell
from harness.cli.summary import sweep_summary
from harness.store import Outcome
from harness.sweeps.sweep_engine import SweepResult


def _result(outcome, metrics, **values):
    return CellResult(Cell.build({"experiment": "pruning", **values}, f"sparsity={values['sparsity']}"),
                      outcome, metrics, run_id="r")


def test_the_summary_rounds_like_the_report_and_carries_its_notes():
    calm = {"train_time_s": 12.345678, "test_accuracy": 0.4712345, "param_count": 1234567.0}
    busy = {**calm, "contended": 1.0, "other_busy_cores": 1.5, "load_avg_before": 2.0, "load_avg_after": 3.0}
    result = SweepResult("sparsity", "smoke", "p1", [_result(Outcome.OK, calm, sparsity=0.0),
                                                     _result(Outcome.OK, busy, sparsity=0.5)], 3.0)
    notes = [{"text": "the book's unpruned row", "when": {"sparsity": 0.0}}]
    text = sweep_summary(result, notes=notes)
    first, second = text.splitlines()[1:3]
    assert "12.3" in first and "47.12%" in first and "1,234,567" in first and "12.345678" not in text
    assert first.endswith("the book's unpruned row")
    assert second.endswith("  contended") and "unpruned" not in second
    # how busy the machine was is said once, below the cells, with the command that measures them again
    (footer,) = [line for line in text.splitlines() if "other work held" in line]
    assert "1 of 2 cell(s) were timed while other work held 1.5 cores" in footer
    assert "`harness sweep sparsity --scale smoke --remeasure-contended`" in footer


def test_a_fully_reused_rerun_says_nothing_ran_and_gives_no_rate():
    done = {"train_time_s": 1.0, "test_accuracy": 0.5, "param_count": 10.0}
    result = SweepResult("sparsity", "smoke", "p1", [_result(Outcome.REUSED, done, sparsity=0.0)], 0.0001)
    last = sweep_summary(result).splitlines()[-1]
    assert "1 reused" in last and "nothing to run" in last and "cell/s" not in last
