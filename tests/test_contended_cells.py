"""Cells timed while other work held the cores (`contended` = 1 from the load probe): their figures
shown in the table and the plot marked "contended, not judged" (a grid point's uncontended repeats
used when it has some), said once per table, never the ground of a verdict, counted in the sweep's
summary with the command that measures them again, and measured again by --remeasure-contended with
one record per cell."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from harness.cli.summary import sweep_summary
from harness.machine import machine_load
from harness.report import checks, plots, render, tables
from harness.specs import sweep_spec
from harness.store import RunRecord
from harness.store.tracking import CELL_ID, OUTCOME
from harness.sweeps.sweep_engine import run_sweep

# The first smoke table: sparsity=0.7 starved (229 s, 0.07x) beside cells of about 16 s.
STARVED = {0.0: [(16.0, 0)], 0.3: [(12.0, 0)], 0.5: [(9.0, 0)], 0.7: [(229.0, 1)]}


def _runs(points: dict[float, list[tuple[float, int]]]) -> list[RunRecord]:
    """Fabricated finished cells: for each sparsity, one cell per round as (time, contended)."""
    runs = []
    for sparsity, cells in points.items():
        for repeat, (time, contended) in enumerate(cells):
            metrics = {"train_time_s": time, "test_accuracy": 0.5, "test_samples": 2000, "param_count": 100.0}
            if contended:
                metrics |= {"contended": 1.0, "other_busy_cores": 1.6, "load_avg_before": 1.2, "load_avg_after": 2.3}
            else:
                metrics |= {"contended": 0.0, "other_busy_cores": 0.1}
            runs.append(RunRecord(f"r{sparsity}-{repeat}", f"s={sparsity} r{repeat}", "FINISHED",
                                  {"sparsity": str(sparsity), "repeat": str(repeat), "seed": str(repeat)},
                                  metrics, {OUTCOME: "ok", CELL_ID: f"c{sparsity}-{repeat}"}, 0))
    return runs


@pytest.fixture
def spec(sweep_file):
    return sweep_spec.load(str(sweep_file("starved", {"sparsity": [0.0, 0.3, 0.5, 0.7]})))


def _report(spec, runs, scale="quick") -> tables.Report:
    """The report of fabricated cells, as `harness report` writes it."""
    table = tables.build_table(spec, runs, scale=scale)
    report = tables.Report(spec, scale, table, [], "test machine", "p1", runs=runs)
    report.verdicts = checks.evaluate(spec.checks, table, axes=spec.axes(), scale=scale)
    report.markdown = render.to_markdown(report, runs[0])
    return report


def test_a_starved_row_keeps_its_figures_marked_contended_not_judged(spec):
    table = tables.build_table(spec, _runs(STARVED))
    row = table.set_index("sparsity").loc[0.7]
    assert row["contended"] == 1 and row["train_time_s"] == 229.0
    assert row["speedup"] == pytest.approx(16 / 229)                # shown: the 0.07x the machine gave
    assert table.set_index("sparsity").loc[0.5, "speedup"] == pytest.approx(16 / 9)
    markdown = render.table_markdown(SimpleNamespace(table=table, spec=spec))
    assert "| 0.7 | 229.0 (contended, not judged) | 0.07x (contended, not judged) |" in markdown, markdown
    assert "| 0.5 | 9 | 1.78x |" in markdown, markdown               # the rows measured alone, unmarked


def test_a_busy_machine_still_gives_a_figure_and_says_so_once_per_table(sweep_file):
    """The issue's quick table: every repeat of both rows contended (27.9 s against 13.3 s). The
    speed-up is shown, marked, and judged by no check; the contention is said once, above the
    table, with the command that measures the cells again, not on each row or each repeat."""
    busy = sweep_spec.load(str(sweep_file("busy_table", {"sparsity": [0.0, 0.5]}, repeats=3, published=(
        '[[checks]]\nkind = "bound"\nmetric = "speedup"\nmin = 1.5\nwhere = { sparsity = 0.5 }\n'
        'scales = ["quick"]\n'))))
    report = _report(busy, _runs({0.0: [(27.9, 1), (28.4, 1), (27.5, 1)], 0.5: [(13.3, 1), (13.1, 1), (13.6, 1)]}))
    row = report.table.set_index("sparsity").loc[0.5]
    assert row["speedup"] == pytest.approx(27.9 / 13.3) and row["contended_baseline"] == 1
    shown = r"\| 0\.5 \| 13\.3 \(IQR [\d.]+\) \(contended, not judged\) \| 2\.10x \[[\d.]+, [\d.]+\] \(contended, not judged\) \|"
    assert re.search(shown, report.markdown), report.markdown
    (verdict,) = report.verdicts
    assert verdict.verdict == checks.Judgement.NA and "sparsity=0.0 (the baseline)" in verdict.detail
    markdown = report.markdown
    assert markdown.count("**Timed under contention**") == 1 and markdown.count("--remeasure-contended") == 1
    above_checks = markdown.split("| check |")[0]   # a verdict names the rows it left out, and why
    assert above_checks.count("other work held") == 1 and "other work held 1.6 cores" in above_checks
    assert "every row: their figures are shown marked" in markdown
    assert "Notes:" not in markdown, markdown                       # no row repeats the clause


def test_a_point_with_uncontended_repeats_uses_those_and_says_what_was_left_out(sweep_file):
    three = sweep_spec.load(str(sweep_file("mixed", {"sparsity": [0.0, 0.5]}, repeats=3)))
    report = _report(three, _runs({0.0: [(10.0, 0)] * 3, 0.5: [(5.0, 0), (5.0, 0), (50.0, 1)]}))
    row = report.table.set_index("sparsity").loc[0.5]
    assert row["train_time_s"] == 5.0 and row["repeats"] == 2 and row["contended_left_out"] == 1
    assert row["contended"] == 0 and row["speedup"] == pytest.approx(2.0)
    assert "1 repeat(s) of sparsity=0.5: left out, the row's figures are its other repeats'" in report.markdown
    assert "not judged" not in report.markdown                       # no figure rests on the left-out repeat


def test_a_contended_baseline_marks_every_speed_up_over_it(spec):
    table = tables.build_table(spec, _runs({0.0: [(99.0, 1)], 0.5: [(9.0, 0)]})).set_index("sparsity")
    assert table.loc[0.5, "speedup"] == pytest.approx(11.0) and table.loc[0.5, "contended_baseline"] == 1
    assert table.loc[0.5, "contended"] == 0                          # its own time is not marked
    markdown = render.table_markdown(SimpleNamespace(table=table.reset_index(), spec=spec))
    assert "| 0.5 | 9 | 11.00x (contended, not judged) |" in markdown, markdown
    verdict = checks.evaluate([{"kind": "bound", "metric": "speedup", "min": 1.1, "where": {"sparsity": 0.5}}],
                              table.reset_index(), axes=["sparsity"])[0]
    assert verdict.verdict == checks.Judgement.NA and "sparsity=0.0 (the baseline)" in verdict.detail, verdict.detail


def test_no_verdict_rests_on_a_contended_cell(spec):
    """A trend on time: with the starved row it fails (229 s at the highest sparsity); left out, the
    three rows measured alone decide it, and the verdict says what it left out."""
    table = tables.build_table(spec, _runs(STARVED))
    trend = {"kind": "trend", "metric": "train_time_s", "x": "sparsity", "direction": "decreasing",
             "min_correlation": 0.8}
    verdict = checks.evaluate([trend], table, axes=["sparsity"])[0]
    assert verdict.verdict == checks.Judgement.PASS, verdict.detail
    assert "3 points" in verdict.detail and "left out: sparsity=0.7" in verdict.detail
    bound = checks.evaluate([{"kind": "bound", "metric": "speedup", "max": 1.0, "where": {"sparsity": 0.7}}],
                            table, axes=["sparsity"])[0]
    assert bound.verdict == checks.Judgement.NA and "left out: sparsity=0.7" in bound.detail
    exact = checks.evaluate([{"kind": "exact", "metric": "param_count", "expected": 100, "where": {"sparsity": 0.7}}],
                            table, axes=["sparsity"])[0]
    assert exact.verdict == checks.Judgement.PASS   # contention slows a cell; it does not change what it counts


def test_the_plot_draws_a_contended_time_apart(spec, monkeypatch, tmp_path):
    table = tables.build_table(spec, _runs(STARVED))
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, width: drawn.append(fig) or path)
    plots.plot(SimpleNamespace(table=table, spec=spec, scale="smoke"), tmp_path / "p.png")
    time_panel = drawn[0].axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in time_panel.get_lines()}
    assert lines["contended, not judged"] == [1.5 * 16.0]   # drawn at the top of the scale, not at 229 s
    assert 229.0 not in lines["ours (smoke)"]
    assert [t.get_text() for t in time_panel.texts] == ["229 (off scale)"]


class _BusyMachine:
    """The load probe around each cell, as a machine where other work holds 1.6 cores."""
    def finish(self):
        return {"load_avg_before": 1.2, "load_avg_after": 2.3, "other_busy_cores": 1.6, "contended": 1.0}


class _IdleMachine:
    """The load probe as an idle machine (this test machine may itself be busy)."""
    def finish(self):
        return {"load_avg_before": 0.1, "load_avg_after": 0.1, "other_busy_cores": 0.0, "contended": 0.0}


def test_remeasure_contended_runs_those_cells_again_with_one_record_each(store, sweep_file, monkeypatch):
    spec = sweep_spec.load(str(sweep_file("busy", {"sparsity": [0.0, 0.5]})))
    monkeypatch.setattr(machine_load, "LoadWatch", _BusyMachine)
    first = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.metrics["contended"] for r in first.results] == [1.0, 1.0]
    summary = sweep_summary(first)
    assert "2 of 2 cell(s) were timed while other work held 1.6 cores" in summary
    assert f"`harness sweep {spec.path.resolve()} --scale smoke --tracking-uri {store.uri} --remeasure-contended` " \
        "measures them again" in summary, summary
    built = tables.build(store, spec, "smoke")
    assert "**Timed under contention**" in built.markdown and "(contended, not judged)" in built.markdown
    monkeypatch.setattr(machine_load, "LoadWatch", _IdleMachine)
    assert [r.outcome for r in run_sweep(spec, store, scale="smoke", show_progress=False).results] == ["reused"] * 2
    lines = []
    again = run_sweep(spec, store, scale="smoke", show_progress=False, remeasure_contended=True, log=lines.append)
    assert [r.outcome for r in again.results] == ["ok", "ok"]
    assert any("timed while other work held 1.6 cores; measured again" in line for line in lines), lines
    assert "contended" not in sweep_summary(again).split("sweep busy")[0].lower()
    cells = store.sweep_runs(store.find_experiment("busy"), "busy")
    assert len(cells) == 2, [c.name for c in cells]   # one record per cell: the contended ones deleted


def test_the_sweep_command_takes_remeasure_contended():
    from harness.cli import _parser

    args = _parser().parse_args(["sweep", "sparsity", "--remeasure-contended"])
    assert args.remeasure_contended and not args.remeasure_drifted


def test_a_study_trial_timed_under_contention_is_marked_in_the_study_report(tmp_path):
    """A study's trials log the same load probe; the report names the ones timed while other work
    held the cores, and shows the column only then."""
    import textwrap

    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from harness.specs import study_spec
    from harness.studies import study_report
    from harness.studies.trial_tags import METRICS_ATTR

    path = tmp_path / "study_loaded.toml"
    path.write_text(textwrap.dedent("""\
        name = "study_loaded"
        experiment = "recipe"
        metrics = ["time_to_accuracy_s"]
        directions = ["minimize"]
        n_trials = 3
        [space]
        batch_size = { choices = [32, 64] }
        [base]
        model = "tiny_cnn"
        dataset = "digits"
        target_accuracy = 0.3
        """))
    spec = study_spec.load(str(path))
    study = optuna.create_study(direction="minimize")
    space = {"batch_size": CategoricalDistribution([32, 64])}
    for seconds, contended in [(9.0, 0.0), (4.0, 1.0), (6.0, 0.0)]:
        study.add_trial(create_trial(params={"batch_size": 32}, distributions=space, value=seconds,
                                     user_attrs={METRICS_ATTR: {"contended": contended, "other_busy_cores": contended}}))
    report = study_report.build(spec, study)
    assert list(report.all_trials["contended"]) == [0.0, 1.0, 0.0]
    assert "contended: trial 1 ran while other work held" in report.text and "its time is likely slow" in report.text
    assert "contended" in report.text.split("contended: trial")[0]   # the front's column: its best trial was
    calm = optuna.create_study(direction="minimize")
    calm.add_trial(create_trial(params={"batch_size": 32}, distributions=space, value=5.0,
                                user_attrs={METRICS_ATTR: {"contended": 0.0}}))
    quiet = study_report.build(spec, calm).text
    assert "contended" not in quiet, quiet
