import pandas as pd
import pytest

from harness.cli import main
from harness.report import report_files, tables as report, writeback
from harness.store.tracking import EXPERIMENT_TAG_LIMIT, RunRecord, Store
from harness.specs import sweep_spec
from harness.errors import UserError
from harness.sweeps.sweep_engine import run_sweep
from conftest import mlflow_client

PUBLISHED = """[published]
note = "test figures"
rows = [
  { sparsity = 0.0, train_time_s = 100, test_accuracy = 0.5 },
  { sparsity = 0.5, train_time_s = 80, test_accuracy = 0.4 },
  { sparsity = 0.8, train_time_s = 50, test_accuracy = 0.3 },
]
"""


def test_report_sets_ours_beside_the_published_figures(store, sweep_file, tmp_path):
    spec = sweep_spec.load(str(sweep_file("rep_table", {"sparsity": [0.0, 0.5]}, repeats=2, published=PUBLISHED)))
    run_sweep(spec, store, show_progress=False)
    built = report.build(store, spec)
    t = built.table.set_index("sparsity")
    assert list(t.index) == [0.0, 0.5, 0.8]
    assert t.loc[0.0, "repeats"] == 2 and t.loc[0.0, "speedup"] == pytest.approx(1.0)
    assert t.loc[0.5, "book_speedup"] == pytest.approx(100 / 80)
    assert t.loc[0.5, "speedup"] == pytest.approx(t.loc[0.0, "train_time_s"] / t.loc[0.5, "train_time_s"])
    assert t.loc[0.5, "param_count"] < t.loc[0.0, "param_count"]
    assert "—" in built.markdown  # the unrun 0.8 row shows the book's figures only
    paths = report_files.write_files(built, tmp_path)
    writeback.attach_files(store, built, paths)
    assert sorted(p.suffix for p in paths) == [".csv", ".md", ".png"]
    assert paths.plot.stat().st_size > 10_000
    logged = {a.path for a in mlflow_client(store).list_artifacts(built.parent_run_id, "report")}
    assert logged == {"report/rep_table.md", "report/rep_table.csv", "report/rep_table.png"}


def test_report_of_a_sweep_not_run_says_how_to_run_it(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("never_run", {"sparsity": [0.0]})))
    with pytest.raises(UserError, match="make sweep-never_run SCALE=smoke"):
        report.build(store, spec)


def test_a_sweep_leaves_its_table_in_the_experiment_and_its_speedups_on_the_cells(sweep_file, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = sweep_file("story", {"sparsity": [0.0, 0.5]}, repeats=2, published=PUBLISHED)
    assert main(["sweep", str(path), "--scale", "smoke", "--tracking-uri", uri, "--no-progress"]) == 0
    store, spec = Store(uri), sweep_spec.load(str(path))
    experiment = mlflow_client(store).get_experiment_by_name("story")
    built = report.build(store, spec)
    note = experiment.tags["mlflow.note.content"]
    assert built.markdown.strip() in note  # the table beside the published figures, verdicts, problems
    parent = mlflow_client(store).get_run(built.parent_run_id)
    assert f"#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id}/artifacts/report/story.png" in note
    logged = {a.path for a in mlflow_client(store).list_artifacts(parent.info.run_id, "report")}
    assert {"report/story.png", "report/story-overview.png", "report/story.md"} <= logged
    # The parent says what ran; its counts are tags, so the chart view holds only the cells' metrics.
    assert parent.data.metrics == {} and parent.data.tags["harness.cells_ok"] == "4"
    what = parent.data.tags["mlflow.note.content"]
    assert "scale **smoke**" in what and "4 cells" in what and "Machine:" in what and "Cells: 4 ok" in what
    # Each repeat carries its grid point's speed-up, the figure the table shows.
    speedup = built.table.set_index("sparsity")["speedup"]
    cells = store.sweep_runs(experiment.experiment_id, "story")
    assert len(cells) == 4
    for cell in cells:
        assert cell.metrics["speedup"] == pytest.approx(speedup[float(cell.params["sparsity"])])
    assert speedup[0.0] == pytest.approx(1.0) and speedup[0.5] != pytest.approx(1.0)
    # `harness report` refreshes the description; an unchanged figure is not logged again.
    store.describe_experiment(experiment.experiment_id, "stale")
    assert main(["report", str(path), "--tracking-uri", uri, "--out", str(tmp_path / "reports")]) == 0
    assert built.markdown.strip() in store.experiment_description(experiment.experiment_id)
    assert len(mlflow_client(store).get_metric_history(cells[0].run_id, "speedup")) == 1


@pytest.mark.slow
def test_a_smoke_report_of_the_shipped_t61_sweep_judges_the_machinery_and_says_so_at_its_top(tmp_path, capsys):
    """The newcomer's first `make sweep-sparsity SCALE=smoke` then `make report-sparsity` (two grid
    points, fewer digits): the figures' claims are N/A with the reason, the exact parameter count is
    still judged (and holds), and no check is a FAIL."""
    from harness.report import checks

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    shrunk = ["--set", "sparsity=[0.0,0.5]", "--set", "train_limit=256", "--set", "test_limit=128"]
    assert main(["sweep", "sparsity", "--scale", "smoke", *shrunk, "--tracking-uri", uri, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", "sparsity", "--tracking-uri", uri, "--out", str(tmp_path / "reports")]) == 0
    printed = capsys.readouterr().out
    (built,) = report.build_all(Store(uri), sweep_spec.load("sparsity"), "smoke")
    by_kind = {v.kind: v for v in built.verdicts}
    assert by_kind["exact"].verdict == checks.Judgement.PASS    # 1,059,306 parameters at 50%
    others = [v for v in built.verdicts if v.kind != "exact"]
    assert others and all(v.verdict == checks.Judgement.NA for v in others)
    # each with its reason: smoke's own, or the document's scale a check is judged at only
    assert all(v.detail == checks.SMOKE_REASON or "judged at scale full only" in v.detail for v in others)
    assert sum(v.detail == checks.SMOKE_REASON for v in others) >= 5
    assert "FAIL" not in {v.label for v in built.verdicts} and "**FAIL**" not in printed
    top = printed.split("\n| ")[0]   # the lines above the first table
    assert "**Smoke checks the machinery, not the claims**" in top, top


def test_cells_get_their_grid_points_efficiency_when_the_sweep_counts_workers(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("eff", {"sparsity": [0.0, 0.5]})))
    table = pd.DataFrame({"sparsity": [0.0, 0.5], "speedup": [1.0, 1.6], "efficiency": [1.0, 0.8]})
    runs = [RunRecord(f"run{i}", f"sparsity={s}", "FINISHED", {"sparsity": s}, {}, {}, 0)
            for i, s in enumerate(["0.5", "0.0", "0.5"])]
    built = report.Report(spec, "smoke", table, [], "machine", "parent", runs=runs)
    assert report.cell_figures(built) == {"run0": {"speedup": 1.6, "efficiency": 0.8},
                                          "run1": {"speedup": 1.0, "efficiency": 1.0},
                                          "run2": {"speedup": 1.6, "efficiency": 0.8}}


def test_a_description_longer_than_mlflow_keeps_is_cut_saying_so(store):
    experiment_id = store.experiment_id("long_description")
    store.describe_experiment(experiment_id, "| a | row |\n" * 3000)
    kept = store.experiment_description(experiment_id)
    assert len(kept) <= EXPERIMENT_TAG_LIMIT and kept.startswith("| a | row |")
    assert kept.rstrip().endswith("the full text is in the report)*")


def test_a_row_shows_its_interval_and_why_it_has_no_mfu():
    from harness.report import render

    assert render.cell_text({"speedup": 1.83, "speedup_lo": 1.76, "speedup_hi": 1.9}, "speedup") == "1.83x [1.76, 1.90]"
    assert render.cell_text({"speedup": 1.83}, "speedup") == "1.83x"
    assert render.cell_text({"mfu": None, "mfu_invalid": 1.0}, "mfu") == render.INVALID_MFU == "peak below achieved"
    assert render.cell_text({"mfu": None, "mfu_na": "MFU N/A: fp16 has no native arithmetic"}, "mfu") == "N/A"
    assert render.cell_text({"mfu": 0.25}, "mfu") == "25.0%"
    assert render.cell_text({"train_time_s": 6.5, "train_time_iqr_s": 0.25, "repeats": 3}, "train_time_s",
                            "train_time_iqr_s") == "6.5 (IQR 0.25)"


def test_an_mfu_over_a_peak_measured_under_load_is_shown_as_an_upper_bound():
    """A peak measured while other work held a core is low, so the MFU over it overstates: the page
    says "at most". The text is read from the provenance line cells log, so it is built by Peak here."""
    from harness.report import render
    from harness.training import peak

    def measured(other_cores):
        return peak.Peak(1.7e11, "cpu", "fp32", 2, "matmul", "2048", "then", 0.81, other_cores,
                         "cpu:fp32:2t").provenance()

    loaded, quiet = measured(1.0), measured(0.0)
    assert render.peak_under_load(loaded) and not render.peak_under_load(quiet)
    assert not render.peak_under_load(measured(0.4)) and not render.peak_under_load(None)
    assert render.peak_under_load(f"{quiet} | {loaded}")   # a row whose cells used both
    assert render.cell_text({"mfu": 0.623, "peak_measured": loaded}, "mfu") == "at most 62.3% (peak under load)"
    assert render.cell_text({"mfu": 0.623, "peak_measured": quiet}, "mfu") == "62.3%"
    assert render.cell_text({"mfu": None, "mfu_invalid": 1.0, "peak_measured": loaded}, "mfu") == "peak below achieved"


def test_the_scale_line_names_only_what_the_grid_keeps_fixed():
    from types import SimpleNamespace

    from harness.report import render

    spec = SimpleNamespace(axes=lambda: ["batch_size"], report={})
    run = RunRecord("r", "n", "FINISHED", {"dataset": "digits", "epochs": "2", "batch_size": "512", "lr": "0.1",
                                           "device": "cpu"}, {"train_samples": 100.0, "test_samples": 50.0,
                                                              "threads_used": 2.0}, {}, 0)
    line = render.scale_line(SimpleNamespace(spec=spec, scale="cpu"), run)
    assert "batch" not in line.split(";")[0] and "lr 0.1" in line and line.endswith("; varied: batch_size.")


def test_cells_without_a_result_are_listed_once_grouped_by_reason():
    from harness.report import render

    lines = render.problems_markdown(["a=1: skipped: needs 16 cores", "a=2: skipped: needs 16 cores",
                                      "a=3: failed: boom"])
    assert lines == ["- skipped: needs 16 cores (2 cells: a=1; a=2)", "- failed: boom (1 cell: a=3)"]


def test_the_report_and_its_ui_links_point_at_the_parent_holding_the_cells(store, sweep_file):
    """A store from before reused invocations made no parent run has an empty, newer parent of the
    same name: the report's files and the description's plot link go to the one with the cells."""
    from harness.report import overview
    from harness.store import Outcome
    from harness.store.tracking import KIND, SCALE, SWEEP

    spec = sweep_spec.load(str(sweep_file("rep_holder", {"sparsity": [0.0, 0.5]})))
    first = run_sweep(spec, store, show_progress=False)
    experiment_id = store.find_experiment("rep_holder")
    empty = store.start_run(experiment_id, "rep_holder (full)", {SWEEP: "rep_holder", SCALE: "full", KIND: "sweep"})
    store.end_run(empty, Outcome.OK)
    assert report.build(store, spec).parent_run_id == first.parent_run_id
    overview.refresh(store, spec)
    text = store.experiment_description(experiment_id)
    assert f"/runs/{first.parent_run_id}/artifacts/report/rep_holder.png?workflowType=machine_learning" in text
    assert empty not in text


def test_the_report_writes_to_the_store_only_through_writeback():
    """The report reads and derives (tables), renders (tables, render, overview, reproduction); what
    it puts back into MLflow goes through one module, which says why it writes."""
    import ast
    from pathlib import Path

    import harness.report

    writes = {"describe_experiment", "start_run", "reopen_run", "log_params", "log_metrics", "set_tags",
              "describe_run", "log_dict", "log_text", "log_artifact", "log_dataset", "end_run", "delete_run",
              "reap_stale_runs", "close_after_fault"}
    assert writes <= set(vars(Store))   # the Store's writing methods, as named today
    offenders = [f"{path.name}: {node.attr}" for path in Path(harness.report.__file__).parent.glob("*.py")
                 if path.name != "writeback.py"
                 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute) and node.attr in writes]
    assert not offenders, offenders
