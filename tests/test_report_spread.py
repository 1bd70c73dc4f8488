"""The report's medians and interquartile ranges over repeats, against values worked out by hand,
and the same figures from harness/training/timing.py's spread (what a cell logs for its own repeats)."""

import pytest

from harness.report import tables as report
from harness.store.tracking import CELL_ID, RunRecord
from harness.specs import sweep_spec
from harness.training.timing import spread

# Repeats of two grid points. sparsity 0.0: four repeats; sparsity 0.5: three (its fourth failed
# and is not among the finished runs the table is built from).
TIMES = {0.0: [30.0, 10.0, 100.0, 20.0], 0.5: [9.0, 12.0, 8.0]}
ACCURACY = {0.0: [0.5, 0.8, 0.6, 0.7], 0.5: [0.4, 0.4, 0.1]}
# By hand, quartiles interpolated linearly between order statistics (position (n - 1) * q):
#   0.0: sorted 10 20 30 100; median (20 + 30) / 2 = 25; Q1 at 0.75: 10 + 0.75 * 10 = 17.5;
#        Q3 at 2.25: 30 + 0.25 * 70 = 47.5; IQR 30.
#   0.5: sorted 8 9 12; median 9; Q1 at 0.5: 8.5; Q3 at 1.5: 10.5; IQR 2.
MEDIAN = {0.0: 25.0, 0.5: 9.0}
IQR = {0.0: 30.0, 0.5: 2.0}
MEDIAN_ACCURACY = {0.0: 0.65, 0.5: 0.4}


def _runs() -> list[RunRecord]:
    runs = []
    for sparsity, times in TIMES.items():
        for repeat, (seconds, accuracy) in enumerate(zip(times, ACCURACY[sparsity])):
            runs.append(RunRecord(f"run-{sparsity}-{repeat}", f"cell {sparsity} #{repeat}", "FINISHED",
                                  {"sparsity": str(sparsity), "repeat": str(repeat)},
                                  {"train_time_s": seconds, "test_accuracy": accuracy},
                                  {CELL_ID: f"cell-{sparsity}-{repeat}"}, 0))
    return runs


def test_the_table_holds_the_median_and_iqr_of_each_grid_points_repeats(sweep_file):
    spec = sweep_spec.load(str(sweep_file("spread", {"sparsity": [0.0, 0.5]}, repeats=4)))
    table = report.build_table(spec, _runs()).set_index("sparsity")
    for sparsity in TIMES:
        row = table.loc[sparsity]
        assert row["train_time_s"] == pytest.approx(MEDIAN[sparsity])
        assert row["train_time_iqr_s"] == pytest.approx(IQR[sparsity])
        assert row["test_accuracy"] == pytest.approx(MEDIAN_ACCURACY[sparsity])
        assert row["repeats"] == len(TIMES[sparsity])
    # The speed-up is taken between medians (the sweep file's baseline is sparsity 0.0) over the
    # rounds both rows ran: 0.5's fourth failed, so the baseline's rounds 0-2 (median 30) against 9.
    assert table.loc[0.5, "speedup"] == pytest.approx(30.0 / 9.0)


def test_a_cells_own_spread_of_its_repeats_agrees_with_the_report():
    for sparsity, times in TIMES.items():
        figures = spread(times)
        assert figures["median"] == pytest.approx(MEDIAN[sparsity])
        assert figures["iqr"] == pytest.approx(IQR[sparsity])
        assert (figures["min"], figures["max"]) == (min(times), max(times))


def test_one_repeat_has_no_spread(sweep_file):
    spec = sweep_spec.load(str(sweep_file("single", {"sparsity": [0.0, 0.5]})))
    one_each = [r for r in _runs() if r.params["repeat"] == "0"]
    table = report.build_table(spec, one_each).set_index("sparsity")
    assert list(table["train_time_s"]) == [30.0, 9.0]
    assert table["train_time_iqr_s"].isna().all()   # one run has no spread to show (printed "-")
    assert spread([30.0])["iqr"] == 0.0
