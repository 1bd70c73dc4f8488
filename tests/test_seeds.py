"""Seeds as the source of accuracy intervals: a sweep's round r trains seed base + r for every row,
a row's accuracy is printed with its interval over those seeds, and accuracy checks have three
outcomes on it, judged here on fabricated runs whose spread over seeds is known. A store from before
(every round trained one seed) says "one seed" and decides nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.report import checks, intervals, render, tables
from harness.store import RunRecord
from harness.store.tracking import CELL_ID, OUTCOME, PROCEDURE
from harness.specs import sweep_spec


def _runs(accuracies: dict[float, list[float]], seeded: bool = True, base: int = 0) -> list[RunRecord]:
    """One finished cell per round and sparsity; round r trained seed base + r (`seeded`) or the
    base seed in every round (a procedure-3 store)."""
    runs = []
    for sparsity, values in accuracies.items():
        for repeat, value in enumerate(values):
            seed = base + repeat if seeded else base
            runs.append(RunRecord(f"r{sparsity}-{repeat}", f"s={sparsity} r{repeat}", "FINISHED",
                                  {"sparsity": str(sparsity), "repeat": str(repeat), "seed": str(seed)},
                                  {"train_time_s": 10.0 + repeat, "test_accuracy": value, "test_samples": 10_000},
                                  {OUTCOME: "ok", CELL_ID: f"c{sparsity}-{repeat}",
                                   PROCEDURE: "4" if seeded else "3"}, 0))
    return runs


@pytest.fixture
def spec(sweep_file):
    return sweep_spec.load(str(sweep_file("seeds", {"sparsity": [0.0, 0.5]}, repeats=3)))


def test_round_r_trains_seed_base_plus_r_the_same_for_every_row(spec):
    cells = sweep_spec.expand(spec, "full")
    seeds = {(c.config.sparsity, c.config.repeat): c.config.seed for c in cells}
    assert seeds == {(0.0, 0): 0, (0.5, 0): 0, (0.0, 1): 1, (0.5, 1): 1, (0.0, 2): 2, (0.5, 2): 2}
    based = sweep_spec.expand(spec, "full", {"seed": 7})
    assert sorted({(c.config.repeat, c.config.seed) for c in based}) == [(0, 7), (1, 8), (2, 9)]
    assert len({c.cell_id for c in cells}) == len(cells)


def test_the_rounds_of_one_sweep_are_one_table_and_another_base_seed_is_another(spec):
    reports = tables.settings_groups(spec, _runs({0.0: [0.5, 0.5, 0.5]}) + _runs({0.0: [0.5, 0.5, 0.5]}, base=5))
    assert sorted(len(r) for r in reports.values()) == [3, 3] and "seed=5" in " ".join(reports)
    assert list(tables.settings_groups(spec, _runs({0.0: [0.5, 0.5, 0.5]}))) == [""]


def test_a_sweep_measured_again_under_a_new_procedure_is_reported_from_the_new_cells_alone(spec):
    """The committed store holds a sweep's procedure-3 cells (one seed in every round) and, once it
    is resumed, the same grid's procedure-4 cells: mixed in one row, 4 rounds of seed 0 would sit
    beside seeds 0-2 as if they were 7 seeds. The table is the new cells', the old ones counted."""
    from harness.store.tracking import SCALE

    old = _runs({0.0: [0.62] * 4, 0.5: [0.55] * 4}, seeded=False)
    new = _runs({0.0: [0.60, 0.62, 0.64], 0.5: [0.55, 0.56, 0.57]})
    elsewhere = _runs({0.0: [0.3] * 3}, seeded=False)   # another machine's old cells: its own table
    for run in old + new + elsewhere:
        run.tags.update({SCALE: "cpu", tables.FINGERPRINT: "m2" if run in elsewhere else "m1"})
    parent = RunRecord("p", "parent", "FINISHED", {}, {}, {SCALE: "cpu"}, 0)
    store = SimpleNamespace(find_experiment=lambda name: "1", uri="sqlite:///seeds.db",
                            sweep_runs=lambda e, name, parents=False: [parent] if parents else new + old + elsewhere)
    here, there = tables.build_all(store, spec, "cpu")
    assert sorted(here.table["seeds"]) == [3, 3] and list(here.table["repeats"]) == [3, 3]
    assert "8 cells measured on this machine under an earlier measurement procedure: this table is procedure" \
        in " ".join(here.left_out)
    assert "Left out of this table:" in here.markdown and not any("earlier" in p for p in here.problems)
    assert list(there.table["repeats"]) == [3] and not any("earlier" in p for p in there.left_out)


def test_an_accuracy_has_its_interval_over_seeds(spec):
    """Seeds 0.60, 0.62, 0.64: the median 0.62, and the bootstrap-SE interval with t(2) = 4.30
    around it; seeds that agree exactly have an interval of no width."""
    table = tables.build_table(spec, _runs({0.0: [0.60, 0.62, 0.64], 0.5: [0.55, 0.55, 0.55]})).set_index("sparsity")
    assert table.loc[0.0, "seeds"] == 3 and table.loc[0.0, "test_accuracy"] == pytest.approx(0.62)
    lo, hi = table.loc[0.0, "test_accuracy_lo"], table.loc[0.0, "test_accuracy_hi"]
    assert lo < 0.60 and hi > 0.64 and hi - 0.62 == pytest.approx(0.62 - lo)
    value, low, high = intervals.median_interval([0.60, 0.62, 0.64])
    assert (value, low, high) == pytest.approx((0.62, lo, hi))
    assert table.loc[0.5, "test_accuracy_lo"] == pytest.approx(0.55) == table.loc[0.5, "test_accuracy_hi"]
    markdown = render.table_markdown(SimpleNamespace(table=table.reset_index(), spec=spec))
    assert "62.00% [" in markdown and "one seed" not in markdown


def test_an_accuracy_interval_stays_between_0_and_1(spec):
    """Three far-apart seeds (ResNet-18 at batch 128 after 2 epochs here: 9.45%, 13.95%, 20.25%):
    t(2) times the bootstrap error reaches below 0, and the interval is cut at 0, never printed
    below it; near 1 it is cut at 1."""
    table = tables.build_table(spec, _runs({0.0: [0.0945, 0.1395, 0.2025], 0.5: [0.90, 0.99, 1.0]}))
    table = table.set_index("sparsity")
    assert intervals.median_interval([0.0945, 0.1395, 0.2025])[1] < 0 < 1 < intervals.median_interval([0.9, 0.99, 1])[2]
    assert table.loc[0.0, "test_accuracy_lo"] == 0.0 and 0.1395 < table.loc[0.0, "test_accuracy_hi"] < 1
    assert table.loc[0.5, "test_accuracy_hi"] == 1.0 and table.loc[0.5, "test_accuracy_lo"] < 0.99


def test_one_seed_says_so_and_invents_no_interval(spec):
    """A procedure-3 store: three repeats of seed 0 with the same accuracy are one training."""
    table = tables.build_table(spec, _runs({0.0: [0.62] * 3, 0.5: [0.55] * 3}, seeded=False))
    assert (table["seeds"] == 1).all() and table["test_accuracy_lo"].isna().all()
    markdown = render.table_markdown(SimpleNamespace(table=table, spec=spec))
    assert "one seed in every row" in markdown and "62.00% [" not in markdown
    check = {"kind": "compare", "metric": "test_accuracy", "where": {"sparsity": 0.5},
             "against": {"sparsity": 0.0}, "within": 0.1}
    verdict = checks.evaluate([check], table, axes=spec.axes(), scale="cpu", repeats=3)[0]
    assert verdict.verdict == checks.Judgement.INCONCLUSIVE and "one seed" in verdict.detail, verdict.detail


def _verdict(spec, accuracies, check):
    table = tables.build_table(spec, _runs(accuracies))
    return checks.evaluate([check], table, axes=spec.axes(), scale="cpu", repeats=3)[0]


def test_an_accuracy_bound_passes_fails_or_is_inconclusive_on_its_interval(spec):
    floor = {"kind": "bound", "metric": "test_accuracy", "min": 0.6, "where": {"sparsity": 0.0}}
    assert _verdict(spec, {0.0: [0.70, 0.71, 0.72], 0.5: [0.5] * 3}, floor).verdict == checks.Judgement.PASS
    assert _verdict(spec, {0.0: [0.50, 0.51, 0.52], 0.5: [0.5] * 3}, floor).verdict == checks.Judgement.FAIL
    spread = _verdict(spec, {0.0: [0.55, 0.62, 0.69], 0.5: [0.5] * 3}, floor)   # median above, interval across
    assert spread.verdict == checks.Judgement.INCONCLUSIVE and "n = 3 seeds" in spread.detail, spread.detail


def test_an_accuracy_within_compare_is_decided_only_when_the_seeds_agree(spec):
    """"Costs little accuracy": within 2 points. Paired by seed, a steady 1-point loss passes; a
    steady 10-point loss fails; a loss of 1 point on one seed and 9 on another is undecided."""
    same = {"kind": "compare", "metric": "test_accuracy", "where": {"sparsity": 0.5},
            "against": {"sparsity": 0.0}, "within": 0.02}
    assert _verdict(spec, {0.0: [0.60, 0.62, 0.64], 0.5: [0.59, 0.61, 0.63]}, same).verdict == checks.Judgement.PASS
    assert _verdict(spec, {0.0: [0.60, 0.62, 0.64], 0.5: [0.50, 0.52, 0.54]}, same).verdict == checks.Judgement.FAIL
    mixed = _verdict(spec, {0.0: [0.60, 0.62, 0.64], 0.5: [0.59, 0.61, 0.55]}, same)
    assert mixed.verdict == checks.Judgement.INCONCLUSIVE, mixed.detail


def test_an_accuracy_best_and_trend_are_judged_over_resampled_seeds(sweep_file):
    three = sweep_spec.load(str(sweep_file("best", {"sparsity": [0.0, 0.5, 0.8]}, repeats=3)))
    best = {"kind": "best", "metric": "test_accuracy", "goal": "highest", "row": {"sparsity": 0.0}}
    clear = {0.0: [0.70, 0.71, 0.72], 0.5: [0.60, 0.61, 0.62], 0.8: [0.50, 0.51, 0.52]}
    assert _verdict(three, clear, best).verdict == checks.Judgement.PASS
    overlapping = {0.0: [0.70, 0.60, 0.72], 0.5: [0.61, 0.71, 0.62], 0.8: [0.50, 0.51, 0.52]}
    assert _verdict(three, overlapping, best).verdict == checks.Judgement.INCONCLUSIVE
    trend = {"kind": "trend", "metric": "test_accuracy", "x": "sparsity", "direction": "decreasing",
             "min_correlation": 0.9}
    assert _verdict(three, clear, trend).verdict == checks.Judgement.PASS
    assert _verdict(three, {0.0: [0.5] * 3, 0.5: [0.6] * 3, 0.8: [0.7] * 3}, trend).verdict == checks.Judgement.FAIL


def test_a_speed_up_over_fewer_rounds_than_its_baseline_prints_the_paired_baseline_time(spec):
    """--until-decided added a 4th round to the baseline alone (a faster day, 6 s): its row shows the
    median of 4 rounds (10.5 s), while the speed-up divides the median of the 3 rounds shared (11 s)."""
    runs = _runs({0.0: [0.5] * 3, 0.5: [0.5] * 3})
    for run in runs:
        run.metrics["train_time_s"] = {"0.0": 10.0, "0.5": 5.0}[run.params["sparsity"]] + int(run.params["repeat"])
    extra = RunRecord("r0-3", "s=0.0 r3", "FINISHED", {"sparsity": "0.0", "repeat": "3", "seed": "3"},
                      {"train_time_s": 6.0, "test_accuracy": 0.5, "test_samples": 10_000},
                      {OUTCOME: "ok", CELL_ID: "c0-3", PROCEDURE: "4"}, 0)
    table = tables.build_table(spec, runs + [extra])
    assert table.set_index("sparsity").loc[0.5, "paired_baseline_time_s"] == 11.0
    assert table.set_index("sparsity").loc[0.5, "speedup"] == pytest.approx(11.0 / 6.0)
    markdown = render.table_markdown(SimpleNamespace(table=table, spec=spec))
    assert "speed-up of sparsity=0.5: over the 3 rounds shared with the baseline, whose median time (s) over them is 11.0" \
        in markdown, markdown


def test_the_same_configuration_in_two_tables_is_a_free_a_a_pair():
    """T9.1's threads=2 and T9.2's 1 x 2 gloo cell: one configuration, two tables, 140.8 vs 156.9 s."""
    from harness.report import aa_pairs

    def cell(sweep, repeat, time, threads="2"):
        return RunRecord(f"{sweep}{repeat}", "c", "FINISHED", {"threads": threads, "repeat": str(repeat), "seed": "0"},
                         {"train_time_s": time}, {CELL_ID: f"id{threads}-{repeat}"}, 0)

    def table(name, axes, runs):
        return SimpleNamespace(spec=SimpleNamespace(name=name, axes=lambda: axes, report={}), runs=runs,
                               fingerprint="m1")
    threads = table("threads", ["threads"], [cell("t", r, v) for r, v in enumerate([140.8, 139.0, 142.0])]
                    + [cell("t", 0, 250.0, threads="1")])
    ddp = table("cpu-ddp", ["threads"], [cell("d", r, v) for r, v in enumerate([156.9, 150.0, 160.0])])
    other_machine = SimpleNamespace(**{**vars(ddp), "fingerprint": "m2"})
    [pair] = aa_pairs.find([threads, ddp, other_machine], lambda spec: spec.name)
    assert pair.tables == ["threads", "cpu-ddp"] and pair.medians == [140.8, 156.9] and pair.rounds == [3, 3]
    assert pair.spread == pytest.approx(156.9 / 140.8 - 1)
    assert "11.4% apart" in aa_pairs.lines([threads, ddp], lambda spec: spec.name, lambda m, v: f"{v:.1f}")[0]
    assert aa_pairs.find([threads], lambda spec: spec.name) == []
