import pytest

from harness.report import tables as report
from harness.sweeps import spec as sweepspec
from harness.errors import UserError
from harness.sweeps.engine import run_sweep
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
    spec = sweepspec.load(str(sweep_file("rep_table", {"sparsity": [0.0, 0.5]}, repeats=2, published=PUBLISHED)))
    run_sweep(spec, store, show_progress=False)
    built = report.build(store, spec)
    t = built.table.set_index("sparsity")
    assert list(t.index) == [0.0, 0.5, 0.8]
    assert t.loc[0.0, "repeats"] == 2 and t.loc[0.0, "speedup"] == pytest.approx(1.0)
    assert t.loc[0.5, "book_speedup"] == pytest.approx(100 / 80)
    assert t.loc[0.5, "speedup"] == pytest.approx(t.loc[0.0, "train_time_s"] / t.loc[0.5, "train_time_s"])
    assert t.loc[0.5, "param_count"] < t.loc[0.0, "param_count"]
    assert "—" in built.markdown  # the unrun 0.8 row shows the book's figures only
    paths = report.write(built, store, tmp_path)
    assert sorted(p.suffix for p in paths) == [".csv", ".md", ".png"]
    assert paths[2].stat().st_size > 10_000
    logged = {a.path for a in mlflow_client(store).list_artifacts(built.parent_run_id, "report")}
    assert logged == {"report/rep_table.md", "report/rep_table.csv", "report/rep_table.png"}


def test_report_of_a_sweep_not_run_says_how_to_run_it(store, sweep_file):
    spec = sweepspec.load(str(sweep_file("never_run", {"sparsity": [0.0]})))
    with pytest.raises(UserError, match="make sweep-never_run SCALE=smoke"):
        report.build(store, spec)
