"""Timing figures as evidence: medians and spreads over repeats, the ratio of medians with its paired
interval, three outcomes for timing checks (decided on fabricated runs whose intervals are known),
repeats grouped only when the configuration is the same, grid points never run listed, rounds added
by --until-decided, and the load-time refusals (a sweep name claimed twice, a check row that matches
nothing)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from harness.errors import UserError
from harness.report import checks, evidence, intervals, render, tables
from harness.store import RunRecord
from harness.store.tracking import CELL_ID, OUTCOME
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep


def _runs(times: dict[float, list[float]], accuracy: float = 0.5) -> list[RunRecord]:
    """Fabricated finished cells: for each sparsity, one cell per round with the given time (round r
    trains seed r, as a sweep's rounds do)."""
    runs = []
    for sparsity, values in times.items():
        for repeat, value in enumerate(values):
            runs.append(RunRecord(f"r{sparsity}-{repeat}", f"s={sparsity} r{repeat}", "FINISHED",
                                  {"sparsity": str(sparsity), "repeat": str(repeat), "seed": str(repeat)},
                                  {"train_time_s": value, "test_accuracy": accuracy, "test_samples": 2000},
                                  {OUTCOME: "ok", CELL_ID: f"c{sparsity}-{repeat}"}, 0))
    return runs


@pytest.fixture
def spec(sweep_file):
    return sweep_spec.load(str(sweep_file("evidence", {"sparsity": [0.0, 0.5]}, repeats=3)))


def test_medians_and_iqr_over_repeats_are_the_hand_computed_ones(spec):
    table = tables.build_table(spec, _runs({0.0: [10.0, 12.0, 11.0], 0.5: [6.0, 5.0, 9.0]})).set_index("sparsity")
    assert table.loc[0.0, "train_time_s"] == 11.0 and table.loc[0.5, "train_time_s"] == 6.0
    # numpy's linear quartiles of (10, 11, 12): 10.5 and 11.5; of (5, 6, 9): 5.5 and 7.5
    assert table.loc[0.0, "train_time_iqr_s"] == pytest.approx(1.0)
    assert table.loc[0.5, "train_time_iqr_s"] == pytest.approx(2.0)
    assert table.loc[0.5, "speedup"] == pytest.approx(11 / 6)
    assert table.loc[0.5, "speedup_lo"] < 11 / 6 < table.loc[0.5, "speedup_hi"]


def test_one_repeat_prints_no_spread_and_no_interval(sweep_file):
    one = sweep_spec.load(str(sweep_file("single", {"sparsity": [0.0, 0.5]})))
    table = tables.build_table(one, _runs({0.0: [10.0], 0.5: [5.0]}))
    assert table["train_time_iqr_s"].isna().all() and table["speedup_hi"].isna().all()
    markdown = render.table_markdown(SimpleNamespace(table=table, spec=one))
    assert "| 0.5 | 5 | 2.00x |" in markdown and "IQR" not in markdown and "[" not in markdown


def test_the_interval_is_paired_by_round_and_the_same_every_time():
    """A machine that drifts 30% between rounds moves both rows alike: paired, the ratio is 2.00x in
    every round and the interval has no width; unpaired, the drift widens it."""
    base = {0: 10.0, 1: 13.0, 2: 16.9}
    half = {k: v / 2 for k, v in base.items()}
    paired = intervals.ratio_of_medians(base, half)
    assert paired.paired and paired.n == 3 and (paired.lo, paired.value, paired.hi) == pytest.approx((2, 2, 2))
    unpaired = intervals.ratio_of_medians(base, {10 + k: v for k, v in half.items()})
    assert not unpaired.paired and unpaired.lo < 1.8 and unpaired.hi > 2.2
    noisy = {0: 5.2, 1: 6.1, 2: 8.0}
    assert intervals.ratio_of_medians(base, noisy) == intervals.ratio_of_medians(base, noisy)   # seeded


def test_a_round_only_one_side_has_is_left_out_of_the_ratio():
    """A fourth round added to the baseline alone, on a machine 30% faster that day, would pull its
    median from 12 to 11 and the speed-up to 1.83x; over the three rounds both sides ran, each at
    exactly 2x, it stays 2.00x with no width."""
    base = {0: 10.0, 1: 12.0, 2: 14.0, 3: 7.0}
    half = {0: 5.0, 1: 6.0, 2: 7.0}
    ratio = intervals.ratio_of_medians(base, half)
    assert ratio.paired and ratio.n == 3 and (ratio.lo, ratio.value, ratio.hi) == pytest.approx((2, 2, 2))
    alone = intervals.ratio_of_medians(base, {0: 5.0, 9: 6.0})   # one shared round: each side on its own
    assert not alone.paired and alone.value == pytest.approx(11.0 / 5.5)


def test_a_known_interval_by_hand():
    """Two rounds: resampled, the ratio of medians is r0 = 2, r1 = 1 or (their medians) 1.5 / 1 = 1.5,
    1.5 / 1.5 = 1 ... The interval is the point times exp(+-t(1) * sd of the log draws)."""
    ratio = intervals.ratio_of_medians({0: 2.0, 1: 1.0}, {0: 1.0, 1: 1.0})
    assert ratio.value == 1.5 and ratio.n == 2
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(intervals.SEED)
    pick = rng.integers(0, 2, (intervals.RESAMPLES, 2))
    draws = np.median(np.array([2.0, 1.0])[pick], axis=1) / 1.0
    spread = np.std(np.log(draws), ddof=1) * stats.t.ppf(0.975, 1)
    assert (ratio.lo, ratio.hi) == pytest.approx((1.5 * math.exp(-spread), 1.5 * math.exp(spread)))


def test_ratios_are_printed_with_their_interval():
    assert intervals.format_ratio(1.8312, 1.7601, 1.9049) == "1.83x [1.76, 1.90]"
    assert intervals.format_ratio(1.8312) == "1.83x"
    assert intervals.format_ratio(float("nan")) == "—"
    assert intervals.format_percent(0.91, 0.854, 0.97) == "91% [85, 97]"


def _timing_verdict(spec, times: dict[float, list[float]], check: dict) -> checks.Verdict:
    table = tables.build_table(spec, _runs(times))
    return checks.evaluate([check], table, axes=spec.axes(), scale="quick", repeats=3)[0]


FLOOR = {"kind": "bound", "metric": "speedup", "where": {"sparsity": 0.5}, "min": 1.5}


def test_a_timing_check_passes_only_when_its_whole_interval_passes(spec):
    tight = _timing_verdict(spec, {0.0: [10.0, 10.1, 9.9], 0.5: [5.0, 5.05, 4.95]}, FLOOR)   # 2.0x, tight
    assert tight.verdict == checks.Judgement.PASS and "n = 3" in tight.detail and "[" in tight.detail
    fails = _timing_verdict(spec, {0.0: [10.0, 10.1, 9.9], 0.5: [9.0, 9.1, 8.9]}, FLOOR)     # 1.11x, tight
    assert fails.verdict == checks.Judgement.FAIL and fails.side == "low"
    # 2.0x at the median, but one round says 1.1x: the interval straddles the floor
    wide = _timing_verdict(spec, {0.0: [10.0, 10.0, 10.0], 0.5: [5.0, 4.5, 9.0]}, FLOOR)
    assert wide.verdict == checks.Judgement.INCONCLUSIVE and "n = 3" in wide.detail


def test_one_run_decides_no_timing_check_but_an_exact_one(spec):
    table = tables.build_table(spec, _runs({0.0: [10.0], 0.5: [5.0]}))
    exact = {"kind": "exact", "metric": "test_accuracy", "where": {"sparsity": 0.5}, "expected": 0.5}
    found = checks.evaluate([FLOOR, exact], table, axes=spec.axes(), scale="quick", repeats=3)
    assert [v.verdict for v in found] == [checks.Judgement.INCONCLUSIVE, checks.Judgement.PASS]
    assert "n = 1" in found[0].detail


def test_compare_and_trend_on_times_have_three_outcomes(spec):
    faster = {"kind": "compare", "metric": "train_time_s", "where": {"sparsity": 0.5},
              "against": {"sparsity": 0.0}, "max_ratio": 0.97}
    falls = {"kind": "trend", "metric": "train_time_s", "x": "sparsity", "min_correlation": 0.8}
    decided = {0.0: [10.0, 12.0, 14.0], 0.5: [5.0, 6.0, 7.0]}       # paired: exactly 0.5 each round
    mixed = {0.0: [10.0, 10.0, 10.0], 0.5: [9.5, 10.5, 9.9]}         # about the same
    assert _timing_verdict(spec, decided, faster).verdict == checks.Judgement.PASS
    assert _timing_verdict(spec, mixed, faster).verdict == checks.Judgement.INCONCLUSIVE
    assert _timing_verdict(spec, {0.0: [5.0, 6.0, 7.0], 0.5: [10.0, 12.0, 14.0]}, faster).verdict == checks.Judgement.FAIL
    falling = {**decided, 0.8: [3.0, 3.6, 4.2]}
    assert _timing_verdict(spec, falling, falls).verdict == checks.Judgement.PASS
    # the medians fall, but one round in three runs the other way at 0.5 and 0.8
    wobbly = {0.0: [10.0, 10.0, 10.0], 0.5: [9.0, 9.0, 11.0], 0.8: [8.0, 8.0, 12.0]}
    assert _timing_verdict(spec, wobbly, falls).verdict == checks.Judgement.INCONCLUSIVE
    rising = {0.0: [3.0, 3.6, 4.2], 0.5: [5.0, 6.0, 7.0], 0.8: [10.0, 12.0, 14.0]}
    assert _timing_verdict(spec, rising, falls).verdict == checks.Judgement.FAIL


def test_accuracy_at_chance_is_not_judged_and_smoke_judges_only_exact_checks(spec):
    runs = _runs({0.0: [10.0, 10.0, 10.0], 0.5: [5.0, 5.0, 5.0]}, accuracy=0.11)   # 2,000 test images
    table = tables.build_table(spec, runs)
    same = {"kind": "compare", "metric": "test_accuracy", "where": {"sparsity": 0.5},
            "against": {"sparsity": 0.0}, "within": 0.02}
    verdict = checks.evaluate([same], table, axes=spec.axes(), scale="quick", repeats=3)[0]
    assert verdict.verdict == checks.Judgement.NA and "within chance" in verdict.detail and "12.0%" in verdict.detail
    exact = {"kind": "exact", "metric": "test_accuracy", "where": {"sparsity": 0.5}, "expected": 0.11}
    smoke = checks.evaluate([FLOOR, exact], table, axes=spec.axes(), scale="smoke", repeats=1)
    assert [v.verdict for v in smoke] == [checks.Judgement.NA, checks.Judgement.PASS] and smoke[0].detail == checks.SMOKE_REASON


def test_a_best_accuracy_check_between_two_untrained_rows_is_not_judged(sweep_file):
    """One row learned (30%), two did not: which of the two untrained rows is lower is noise, so a
    "lowest" claim about one of them is N/A; "the highest" said of an untrained row is N/A too (it
    lost to training, not to the learned row's setting), while "highest" of the learned row is judged."""
    three = sweep_spec.load(str(sweep_file("best", {"sparsity": [0.0, 0.5, 0.8]}, repeats=3)))
    accuracy = {0.0: 0.30, 0.5: 0.095, 0.8: 0.096}
    runs = [r for s, a in accuracy.items() for r in _runs({s: [10.0, 10.0, 10.0]}, accuracy=a)]
    table = tables.build_table(three, runs)
    lowest = {"kind": "best", "metric": "test_accuracy", "goal": "lowest", "row": {"sparsity": 0.5}}
    highest = {"kind": "best", "metric": "test_accuracy", "goal": "highest", "row": {"sparsity": 0.5}}
    learned = {"kind": "best", "metric": "test_accuracy", "goal": "highest", "row": {"sparsity": 0.0}}
    untrained, stated_untrained, judged = checks.evaluate([lowest, highest, learned], table, axes=three.axes(),
                                                          scale="cpu", repeats=3)
    assert untrained.verdict == checks.Judgement.NA and "9.5%, 9.6%" in untrained.detail and "noise" in untrained.detail
    assert stated_untrained.verdict == checks.Judgement.NA and "9.5%" in stated_untrained.detail, stated_untrained.detail
    assert judged.verdict == checks.Judgement.PASS and "0.3" in judged.detail, judged.detail


def test_an_accuracy_trend_ranks_its_untrained_rows_as_one_level(sweep_file):
    """Three rows at chance and one that learned cannot show a trend (N/A, not the FAIL a tie-bound
    rank correlation gave); with three learned rows the untrained ones tie, so their noise (9.5%
    above 9.4%) does not break a falling trend, and a trend the other way still fails."""
    five = sweep_spec.load(str(sweep_file("trend", {"sparsity": [0.0, 0.2, 0.4, 0.6, 0.8]}, repeats=3)))

    def verdict(accuracy, direction, need=0.8):
        runs = [r for s, a in accuracy.items() for r in _runs({s: [10.0, 10.0, 10.0]}, accuracy=a)]
        check = {"kind": "trend", "metric": "test_accuracy", "x": "sparsity", "direction": direction,
                 "min_correlation": need}
        return checks.evaluate([check], tables.build_table(five, runs), axes=five.axes(), scale="cpu", repeats=3)[0]

    one_learned = verdict({0.0: 0.0955, 0.2: 0.0955, 0.4: 0.0955, 0.6: 0.1995}, "increasing")
    assert one_learned.verdict == checks.Judgement.NA and "3 of 4 rows" in one_learned.detail, one_learned.detail
    diverged = {0.0: 0.50, 0.2: 0.40, 0.4: 0.30, 0.6: 0.094, 0.8: 0.095}
    falling = verdict(diverged, "decreasing", need=0.95)   # rho -0.97 with the tie, -0.90 without
    assert falling.verdict == checks.Judgement.PASS and "5 points" in falling.detail, falling.detail
    assert verdict(diverged, "increasing").verdict == checks.Judgement.FAIL


def test_the_summary_counts_kinds_of_evidence_apart():
    verdicts = [checks.Verdict("a", checks.Judgement.PASS, "", "exact"), checks.Verdict("b", checks.Judgement.PASS, "", "bound"),
                checks.Verdict("c", checks.Judgement.FAIL, "", "bound", stand_in=True),
                checks.Verdict("d", checks.Judgement.INCONCLUSIVE, "", "bound"), checks.Verdict("e", checks.Judgement.NA, "", "trend")]
    assert evidence.count_line(verdicts) == ("measured claims 1 PASS, 1 inconclusive; stand-ins 1 FAIL; "
                                           "exact facts 1 PASS; 1 N/A")


@pytest.mark.parametrize("name", sweep_spec.available())
def test_shipped_training_sweeps_repeat_three_times_off_smoke(name):
    import experiments

    spec = sweep_spec.load(name)
    # The others time repeats inside one cell; hybridize's and async's timings are ratios whose noise is
    # per process (identical cells differ by 4-11% between processes), so they run 3 processes too.
    repeated = experiments.get(spec.experiment).needs_dataset or name in ("hybridize", "async")
    assert [spec.repeats_at(s) for s in spec.scales] == [1 if s == "smoke" or not repeated else 3
                                                         for s in spec.scales]


def test_a_quick_sweep_runs_every_point_three_times():
    sparsity = sweep_spec.load("sparsity")
    assert len(sweep_spec.expand(sparsity, "quick")) == 27


def test_a_scale_may_set_its_own_repeats(sweep_file):
    path = sweep_file("scaled", {"sparsity": [0.0]})
    path.write_text(path.read_text().replace("[scales.smoke]\n", "[scales.smoke]\nrepeats = 2\n"))
    spec = sweep_spec.load(str(path))
    assert spec.repeats_at("smoke") == 2 and [c.config.repeat for c in sweep_spec.expand(spec, "smoke")] == [0, 1]


def test_repeats_are_the_same_configuration_and_unrun_points_are_listed(store, sweep_file, tmp_path):
    """The issue's example, shrunk: the same sweep plain and with --set model=cnn is two tables, each
    with its own parameter count, never one row of 'repeats 2' mixing them."""
    spec = sweep_spec.load(str(sweep_file("variants", {"sparsity": [0.0, 0.5, 0.8]})))
    run_sweep(spec, store, scale="smoke", show_progress=False, select=lambda c: c.config.sparsity < 0.8)
    run_sweep(spec, store, scale="smoke", overrides={"model": "cnn", "sparsity": [0.5]}, show_progress=False)
    reports = tables.build_all(store, spec, "smoke")
    assert sorted(r.variant for r in reports) == ["model=cnn", "model=tiny_cnn"]
    by = {r.variant: r.table.set_index("sparsity") for r in reports}
    assert by["model=cnn"].loc[0.5, "param_count"] == 1059306 and by["model=cnn"].loc[0.5, "repeats"] == 1
    assert by["model=tiny_cnn"].loc[0.5, "param_count"] < 10_000 and by["model=tiny_cnn"].loc[0.5, "repeats"] == 1
    # the 0.8 point ran in neither: listed as not run
    assert by["model=tiny_cnn"].loc[0.8, "note"] == "not run" and pd.isna(by["model=tiny_cnn"].loc[0.8, "repeats"])
    plain = next(r for r in reports if r.variant == "model=tiny_cnn")
    assert "(model=tiny_cnn)" in plain.markdown.splitlines()[0] and "not run" in plain.markdown
    assert all(r.runs[0].metrics.get("speed_index", 0) > 0 for r in reports)   # every cell logged it
    from harness.report import overview

    written = overview.publish(store, spec, store.find_experiment(spec.name), reports, tmp_path)
    names = [paths[0].name for paths in written]
    assert names[0] == "variants.md" and names[1].startswith("variants-model") and len(set(names)) == 2


def test_until_decided_adds_rounds_only_for_undecided_points(store, sweep_file, monkeypatch):
    """One round of a sweep whose quick scale wants 3 leaves its timing check INCONCLUSIVE (n = 1):
    a round is added for the points the check reads (0.5 and its baseline 0.0), none for 0.8, and
    the check, decided at n = 2, stops the rounds before K."""
    from harness.cli import decide
    from harness.specs.sweep_job import SweepJob

    published = """[[checks]]
kind = "bound"
metric = "speedup"
where = { sparsity = 0.5 }
min = 0.0
max = 1e9
text = "any speed-up at all"
"""
    path = sweep_file("decide", {"sparsity": [0.0, 0.5, 0.8]}, published=published)
    path.write_text(path.read_text().replace("repeats = 1\n", "repeats = 3\n"))
    spec = sweep_spec.load(str(path))
    run_sweep(spec, store, scale="quick", show_progress=False, repeats=1)
    report = tables.build(store, spec, "quick")
    assert report.verdicts[0].verdict == checks.Judgement.INCONCLUSIVE   # n = 1
    assert decide.undecided_points(report) == [{"sparsity": 0.5}, {"sparsity": 0.0}]
    lines = []
    rounds = decide.run_until_decided(SweepJob.build(spec, "quick"), store, max_repeats=3, show_progress=False,
                                      log=lines.append)
    after = tables.build(store, spec, "quick").table.set_index("sparsity")
    assert list(after["repeats"]) == [2, 2, 1] and len(rounds) == 1
    assert any("every check of decide (quick) is decided; stopped by the rule" in line for line in lines), lines
    assert "  PASS at n = 2: any speed-up at all" in lines, lines


def test_a_sweep_name_claimed_by_two_files_is_refused(sweep_file, tmp_path):
    first = sweep_file("twice", {"sparsity": [0.0]})
    (tmp_path / "copy.toml").write_text(first.read_text())
    with pytest.raises(UserError, match="sweep name 'twice' is claimed by both"):
        sweep_spec.load(str(first))


def test_a_check_row_that_matches_no_grid_point_is_refused_at_load(sweep_file):
    wrong = """[[checks]]
kind = "bound"
metric = "speedup"
where = { sparsity = 0.55 }
min = 1.0
text = "a row nobody runs"
"""
    path = sweep_file("norow", {"sparsity": [0.0, 0.5]}, published=wrong)
    with pytest.raises(UserError, match="where sparsity = 0.55, which no grid point or published row has"):
        sweep_spec.load(str(path))


def test_max_repeats_needs_until_decided_and_two_runs(sweep_file, capsys):
    from conftest import assert_one_sentence_exit_2

    path = str(sweep_file("flags", {"sparsity": [0.0]}))
    assert_one_sentence_exit_2(["sweep", path, "--max-repeats", "4"], ["--max-repeats needs --until-decided"], capsys)
    assert_one_sentence_exit_2(["sweep", path, "--until-decided", "--max-repeats", "1"], ["at least 2"], capsys)


def test_until_decided_from_the_command_line(sweep_file, tmp_path, capsys):
    from harness.cli import main

    published = """[[checks]]
kind = "bound"
metric = "speedup"
where = { sparsity = 0.5 }
min = 1e6
text = "a speed-up no machine reaches"
"""
    path = sweep_file("cli_decide", {"sparsity": [0.0, 0.5]}, published=published)
    path.write_text(path.read_text().replace("repeats = 1\n", "repeats = 2\n"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(path), "--scale", "quick", "--until-decided", "--max-repeats", "3",
                 "--tracking-uri", uri, "--no-progress"]) == 0
    out = capsys.readouterr().out
    # after 2 rounds the whole interval is far below a million-fold floor: FAIL, decided, no third round
    assert "until-decided: every check of cli_decide (quick) is decided; stopped by the rule" in out
    assert "FAIL at n = 2: a speed-up no machine reaches" in out
    assert "round 3" not in out
