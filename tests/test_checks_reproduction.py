import pandas as pd

from harness.report import checks
from harness.sweeps import spec as sweepspec
from harness.report.reproduction import write_reproduction
from harness.sweeps.engine import run_sweep

TABLE = pd.DataFrame({
    "sparsity": [0.0, 0.5, 0.8],
    "train_time_s": [10.0, 7.0, 5.0],
    "test_accuracy": [0.50, 0.45, 0.47],
    "param_count": [2122186, 1059306, 432654],
    "speedup": [1.0, 10 / 7, 2.0],
    "book_speedup": [1.0, 1.37, 1.61],
})


def _one(check):
    return checks.evaluate([check], TABLE)[0]


def test_exact_passes_on_the_fact_and_fails_otherwise():
    ok = _one({"kind": "exact", "metric": "param_count", "where": {"sparsity": 0.5}, "expected": 1059306})
    bad = _one({"kind": "exact", "metric": "param_count", "where": {"sparsity": 0.5}, "expected": 1059307})
    missing = _one({"kind": "exact", "metric": "param_count", "where": {"sparsity": 0.3}, "expected": 1})
    assert (ok.verdict, bad.verdict, missing.verdict) == ("PASS", "FAIL", "N/A")
    assert "1,059,306" in bad.detail


def test_trend_uses_rank_correlation_in_the_stated_direction():
    falls = _one({"kind": "trend", "metric": "train_time_s", "x": "sparsity", "direction": "decreasing"})
    rises = _one({"kind": "trend", "metric": "train_time_s", "x": "sparsity", "direction": "increasing"})
    noisy = _one({"kind": "trend", "metric": "test_accuracy", "x": "sparsity", "min_correlation": 0.9})
    assert (falls.verdict, rises.verdict, noisy.verdict) == ("PASS", "FAIL", "FAIL")
    assert "rho = -1.00" in falls.detail


def test_ratio_compares_with_the_published_figure_within_the_tolerance():
    at_half = _one({"kind": "ratio", "metric": "speedup", "where": {"sparsity": 0.5}, "tolerance": 0.1})
    everywhere = _one({"kind": "ratio", "metric": "speedup", "tolerance": 0.1})
    loose = _one({"kind": "ratio", "metric": "speedup", "tolerance": 0.3})
    assert (at_half.verdict, everywhere.verdict, loose.verdict) == ("PASS", "FAIL", "PASS")


def test_unknown_kind_is_not_a_pass():
    assert _one({"kind": "vibes"}).verdict == "N/A"


def test_reproduction_report_has_verdicts_and_says_what_is_not_run(store, tmp_path, monkeypatch, sweep_file):
    published = """[published]
rows = [ { sparsity = 0.0, train_time_s = 100 }, { sparsity = 0.5, train_time_s = 80 } ]
[[checks]]
kind = "exact"
metric = "param_count"
where = { sparsity = 0.0 }
expected = 9802
text = "tiny CNN has 9,802 parameters"
"""
    ran = sweep_file("repro_ran", {"sparsity": [0.0, 0.5]}, published=published)
    sweep_file("repro_unrun", {"sparsity": [0.0]})
    monkeypatch.setattr(sweepspec, "SWEEPS_DIR", ran.parent)
    run_sweep(sweepspec.load("repro_ran"), store, show_progress=False)
    path, summary = write_reproduction(store, tmp_path / "out")
    text = path.read_text()
    assert summary == "1 of 2 tables run (not run: repro_unrun); checks: 1 PASS"
    assert "| tiny CNN has 9,802 parameters | **PASS** | measured 9,802 |" in text
    assert "**Not run**" in text and "make sweep-repro_unrun SCALE=smoke" in text
    assert (tmp_path / "out" / "repro_ran.png").exists()


def test_cells_from_another_machine_are_reported_separately(store, sweep_file, monkeypatch):
    from harness import fingerprint as fp_module
    from harness.report import tables as report

    spec = sweepspec.load(str(sweep_file("two_machines", {"sparsity": [0.0, 0.5]})))
    run_sweep(spec, store, overrides={"sparsity": [0.0]}, show_progress=False)
    other = {**fp_module.fingerprint(), "fingerprint": "otherbox01", "cpu.model": "Other CPU"}
    monkeypatch.setattr("harness.store.tracking.fingerprint", lambda: other)
    run_sweep(spec, store, show_progress=False)  # 0.5 runs on "the other machine"
    reports = report.build_all(store, spec)
    assert len(reports) == 2
    assert {len(r.table.dropna(subset=["train_time_s"])) for r in reports} == {1}
    assert "reported separately" in reports[0].markdown and "Other CPU" in reports[1].markdown


def test_bound_checks_our_own_figure():
    inside = _one({"kind": "bound", "metric": "test_accuracy", "min": 0.4, "max": 0.6})
    above = _one({"kind": "bound", "metric": "test_accuracy", "where": {"sparsity": 0.0}, "max": 0.45})
    assert (inside.verdict, above.verdict) == ("PASS", "FAIL")


def test_report_of_a_compound_axis_names_unrun_published_rows(store, tmp_path):
    """Published rows with no cell are named by the fields a compound axis varies (regression:
    the grid's axis name is not a column of the table)."""
    from harness.report import tables as report
    from harness.sweeps.spec import SweepSpec

    from conftest import TINY_BASE

    spec = SweepSpec(name="compound", title="compound", experiment="pruning", base=dict(TINY_BASE),
                     grid={"layout": [{"sparsity": 0.0, "batch_size": 32}, {"sparsity": 0.5, "batch_size": 64}]},
                     scales={"full": {}}, report={"x": "sparsity", "baseline": {"sparsity": 0.0}},
                     published={"rows": [{"sparsity": 0.8, "batch_size": 64, "train_time_s": 1.0}]})
    run_sweep(spec, store, show_progress=False)
    built = report.build(store, spec)
    assert list(built.table["sparsity"]) == [0.0, 0.5, 0.8]
    assert "sparsity=0.8 batch_size=64: 0 of 1 repeats finished" in built.markdown
