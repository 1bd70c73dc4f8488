import pandas as pd
import pytest

from conftest import toml_value
from harness.errors import UserError
from harness.report import checks
from harness.specs import sweep_spec
from harness.report.reproduction import write_reproduction
from harness.sweeps.sweep_engine import run_sweep

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
    monkeypatch.setattr(sweep_spec, "SWEEPS_DIR", ran.parent)
    run_sweep(sweep_spec.load("repro_ran"), store, show_progress=False)
    path, summary = write_reproduction(store, tmp_path / "out")
    text = path.read_text()
    assert summary == "1 of 2 tables run (not run: repro_unrun); checks: exact facts 1 PASS"
    assert "| tiny CNN has 9,802 parameters | **PASS** | measured 9,802 |" in text
    assert "**Not run**" in text and "make sweep-repro_unrun SCALE=smoke" in text
    assert (tmp_path / "out" / "repro_ran.png").exists()
    # the first screen: the cells' machine on line 3, each glance row the shown claim's own verdict
    from harness.machine.fingerprint import fingerprint

    line3 = text.splitlines()[2]
    assert line3.startswith("**Measured on** ") and fingerprint()["fingerprint"] in line3, line3
    glance = next(line for line in text.splitlines() if line.startswith("| repro_ran") or "`repro_ran`" in line)
    assert "| tiny CNN has 9,802 parameters | measured 9,802 | **PASS** | exact fact | exact facts 1 PASS |" in glance
    assert "…" not in text and "Written on" not in text
    # a results folder holding some of the tables: its page names those alone, never the others as not run
    path, summary = write_reproduction(store, tmp_path / "some", ["repro_ran"])
    assert summary == "1 of 1 tables run; checks: exact facts 1 PASS"
    assert "repro_unrun" not in path.read_text()


def test_cells_from_another_machine_are_reported_separately(store, sweep_file, monkeypatch):
    from harness.machine import fingerprint as fp_module
    from harness.report import tables as report

    spec = sweep_spec.load(str(sweep_file("two_machines", {"sparsity": [0.0, 0.5]})))
    run_sweep(spec, store, overrides={"sparsity": [0.0]}, show_progress=False)
    other = {**fp_module.fingerprint(), "fingerprint": "otherbox01", "cpu.model": "Other CPU"}
    monkeypatch.setattr("harness.machine.fingerprint.fingerprint", lambda: other)
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
    from harness.specs.sweep_spec import SweepSpec

    from conftest import TINY_BASE

    spec = SweepSpec(name="compound", title="compound", experiment="pruning", base=dict(TINY_BASE), repeats=1,
                     grid={"layout": [{"sparsity": 0.0, "batch_size": 32}, {"sparsity": 0.5, "batch_size": 64}]},
                     scales={"full": {}}, report={"x": "sparsity", "baseline": {"sparsity": 0.0}},
                     published={"rows": [{"sparsity": 0.8, "batch_size": 64, "train_time_s": 1.0}]})
    run_sweep(spec, store, show_progress=False)
    built = report.build(store, spec)
    assert list(built.table["sparsity"]) == [0.0, 0.5, 0.8]
    assert "sparsity=0.8 batch_size=64: 0 of 1 repeats finished" in built.markdown


LAYOUTS = pd.DataFrame({
    "world_size": [1, 2, 4, 2, 4],
    "backend": ["gloo", "gloo", "gloo", "ccl", "ccl"],
    "train_time_s": [73.0, 58.0, 45.0, 53.0, 42.0],
    "test_accuracy": [0.4534, 0.4401, 0.4011, 0.4312, 0.4103],
})


def _on_layouts(check):
    return checks.evaluate([check], LAYOUTS, axes=["world_size", "backend"])[0]


def test_compare_pairs_rows_on_the_axes_it_does_not_name():
    faster = _on_layouts({"kind": "compare", "metric": "train_time_s", "where": {"backend": "ccl"},
                          "against": {"backend": "gloo"}, "max_ratio": 0.95})
    slower = _on_layouts({"kind": "compare", "metric": "train_time_s", "where": {"backend": "gloo"},
                          "against": {"backend": "ccl"}, "max_ratio": 0.95})
    same = _on_layouts({"kind": "compare", "metric": "test_accuracy", "where": {"backend": "ccl"},
                        "against": {"backend": "gloo"}, "within": 0.02})
    apart = _on_layouts({"kind": "compare", "metric": "test_accuracy", "where": {"backend": "ccl"},
                         "against": {"backend": "gloo"}, "within": 0.005})
    assert (faster.verdict, slower.verdict, same.verdict, apart.verdict) == ("PASS", "FAIL", "PASS", "FAIL")
    assert "world_size=2: 53 vs 58 (ratio 0.91" in faster.detail and "world_size=4" in faster.detail
    assert "world_size=1" not in faster.detail  # gloo's 1-instance row has no ccl partner


def test_compare_of_two_single_rows_and_a_missing_one():
    beats = _on_layouts({"kind": "compare", "metric": "train_time_s", "where": {"world_size": 1, "backend": "gloo"},
                         "against": {"world_size": 2, "backend": "gloo"}, "min_ratio": 1.2})
    missing = _on_layouts({"kind": "compare", "metric": "train_time_s", "where": {"world_size": 8},
                           "against": {"world_size": 1}, "min_ratio": 1.0})
    assert (beats.verdict, missing.verdict) == ("PASS", "N/A")
    assert "73 vs 58 (ratio 1.26" in beats.detail and "world_size=8" in missing.detail


def test_best_needs_the_stated_row_strictly_ahead():
    lowest = _one({"kind": "best", "metric": "train_time_s", "goal": "lowest", "row": {"sparsity": 0.8}})
    not_highest = _one({"kind": "best", "metric": "test_accuracy", "goal": "highest", "row": {"sparsity": 0.8}})
    tied = checks.evaluate([{"kind": "best", "metric": "m", "goal": "lowest", "row": {"x": 1}}],
                           pd.DataFrame({"x": [1, 2, 3], "m": [5.0, 5.0, 6.0]}))[0]
    absent = _one({"kind": "best", "metric": "train_time_s", "goal": "lowest", "row": {"sparsity": 0.3}})
    assert (lowest.verdict, not_highest.verdict, tied.verdict, absent.verdict) == ("PASS", "FAIL", "FAIL", "N/A")
    assert "0.5 (sparsity=0.0)" in not_highest.detail


def test_flat_is_the_spread_of_the_rows_within_a_tolerance():
    near = _one({"kind": "flat", "metric": "test_accuracy", "tolerance": 0.12})
    far = _one({"kind": "flat", "metric": "train_time_s", "tolerance": 0.12})
    picked = _one({"kind": "flat", "metric": "train_time_s", "where": {"sparsity": [0.5, 0.8]}, "tolerance": 0.5})
    alone = _one({"kind": "flat", "metric": "train_time_s", "where": {"sparsity": [0.5]}, "tolerance": 0.5})
    assert (near.verdict, far.verdict, picked.verdict, alone.verdict) == ("PASS", "FAIL", "PASS", "N/A")
    assert "spread 11% over 3 rows" in near.detail and "spread 40% over 2 rows" in picked.detail


def test_a_trend_of_identical_values_is_no_trend():
    flat = checks.evaluate([{"kind": "trend", "metric": "m", "x": "x", "direction": "increasing"}],
                           pd.DataFrame({"x": [1, 2, 3], "m": [1.0, 1.0, 1.0]}))[0]
    assert flat.verdict == "FAIL" and "the same in all 3 points" in flat.detail


def test_a_check_for_the_document_scale_is_not_judged_on_a_smaller_one():
    check = {"kind": "bound", "metric": "test_accuracy", "min": 0.9, "scales": ["full"]}
    at_smoke, at_full = (checks.evaluate([check], TABLE, scale=s)[0] for s in ("smoke", "full"))
    assert at_smoke.verdict == "N/A" and "scale full only" in at_smoke.detail and "smoke" in at_smoke.detail
    assert at_full.verdict == "FAIL"


@pytest.mark.parametrize("check, words", [
    ({"kind": "compare", "metric": "m", "where": {"x": 1}, "max_ratio": 1}, "needs 'against'"),
    ({"kind": "compare", "metric": "m", "where": {"x": 1}, "against": {"x": 2}}, "at least one of min_ratio"),
    ({"kind": "ratio", "metric": "m", "tolerence": 0.1}, "needs 'tolerance'"),
    ({"kind": "ratio", "metric": "m", "tolerance": 0.1, "tolerence": 0.1}, "unknown key 'tolerence'"),
    ({"kind": "best", "metric": "m", "goal": "fastest", "row": {"x": 1}}, "key 'goal': must be 'lowest' or 'highest'"),
    ({"kind": "flat", "metric": "m", "tolerance": 0.1, "needs": {"ram": 64}}, "unknown need 'ram'"),
    ({"kind": "bound", "metric": "m", "min": 1, "on": "ours"}, "needs a reason"),
    ({"kind": "bound", "metric": "m"}, "at least one of min, max"),
    ({"kind": "flat", "metric": "m", "tolerance": "10%"}, "key 'tolerance': must be a number"),
    ({"kind": "vibes"}, "unknown check kind 'vibes'"),
])
def test_a_mistyped_check_stops_the_sweep_file_with_one_sentence(sweep_file, check, words):
    path = sweep_file("bad_check", {"sparsity": [0.0]},
                      published="[[checks]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in check.items()))
    with pytest.raises(UserError) as err:
        sweep_spec.load(str(path))
    message = str(err.value)
    assert words in message and "checks.0" in message and "\n" not in message


def test_compare_pairs_on_an_axis_both_sides_restrict_alike():
    """cpu-ddp: a 1-process cell never uses its backend, so the ccl-vs-gloo claims name world_size on
    both sides; the rows are still paired world size by world size."""
    table = pd.concat([LAYOUTS, pd.DataFrame({"world_size": [1], "backend": ["ccl"], "train_time_s": [90.0],
                                              "test_accuracy": [0.45]})], ignore_index=True)
    check = {"kind": "compare", "metric": "train_time_s", "max_ratio": 0.95,
             "where": {"backend": "ccl"}, "against": {"backend": "gloo"}}
    everywhere = checks.evaluate([check], table, axes=["world_size", "backend"])[0]
    ddp_only = checks.evaluate([{**check, "where": {"backend": "ccl", "world_size": [2, 4]},
                                 "against": {"backend": "gloo", "world_size": [2, 4]}}],
                               table, axes=["world_size", "backend"])[0]
    assert everywhere.verdict == "FAIL" and "world_size=1: 90 vs 73" in everywhere.detail
    assert ddp_only.verdict == "PASS" and ddp_only.detail.count("world_size=") == 2


@pytest.mark.parametrize("check, words", [
    ({"kind": "bound", "metric": "m", "min": True}, "key 'min': must be a number (got True)"),
    ({"kind": "trend", "metric": "m", "x": "x", "direction": "up"}, "key 'direction': must be 'increasing' or 'decreasing'"),
    ({"kind": "bound", "metric": "m", "min": 1, "scales": "full"}, "key 'scales': must be a list of scale names"),
    ({"kind": "bound", "metric": "m", "min": 1, "where": 3}, "key 'where': must be a table"),
    ({"kind": "bound", "metric": "m", "min": 1, "on": "theirs"}, "key 'on': must be 'published' or 'ours'"),
])
def test_a_mistyped_value_in_a_check_is_named_with_what_it_should_be(check, words):
    from harness.specs import checkkinds

    with pytest.raises(ValueError) as err:
        checkkinds.parse(check)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_check_kinds_the_report_documents_are_the_ones_a_sweep_file_may_use():
    """One registry: each kind is a model in harness/specs/checkkinds.py with a judge in the report, and
    the report's docstring shows each in TOML, in the registry's order."""
    import textwrap
    import tomllib

    from harness.specs import checkkinds

    assert list(checks.JUDGES) == list(checkkinds.KINDS)
    assert all(model.model_fields["kind"].default == kind for kind, model in checkkinds.KINDS.items())
    shown = checks.__doc__.split("Every kind also takes")[0]
    documented = tomllib.loads(textwrap.dedent(shown[shown.index("    [[checks]]"):]))["checks"]
    assert [type(checkkinds.parse(c)) for c in documented] == list(checkkinds.KINDS.values())


def test_a_check_keeps_its_numbers_as_written():
    """An exact count stays an int (the report prints 1,059,306, not 1,059,306.0)."""
    from harness.specs import checkkinds

    exact = checkkinds.parse({"kind": "exact", "metric": "param_count", "expected": 1059306})
    assert isinstance(exact.expected, int) and exact.name == "exact check of param_count"
    assert checkkinds.parse(exact) is exact


def test_reproduction_md_says_at_its_top_which_tables_are_smoke():
    from types import SimpleNamespace

    from harness.report.reproduction import caveats

    def table(scale):
        return SimpleNamespace(spec=sweep_spec.load("sparsity"), scale=scale, table=pd.DataFrame({"sparsity": [0.0]}),
                               problems=[], runs=[], verdicts=[])

    (line,) = caveats([table("smoke")], {}, {})
    assert line.startswith("- **Smoke** (T6.1 `sparsity`): smoke checks the machinery, not the claims;"), line
    assert caveats([table("quick")], {}, {}) == ["- none"]
