"""The saved view `harness ui` links a sweep to (harness/report/ui_view.py): the runs table holding
the newest table's cells alone, its grid values and figures as the first columns. Its filter is
run through MLflow's own search here; tests/test_ui_browser.py loads the view in Chromium."""

from __future__ import annotations

import json

from conftest import mlflow_client

from harness import ui_links
from harness.report import overview, ui_view
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep


def _saved_view(store, experiment_id: str) -> tuple[dict, dict]:
    """The view's envelope and its state, as MLflow's UI decodes them (savedViewEnvelope.ts)."""
    envelope = json.loads(store.experiment_tags(experiment_id)[ui_links.VIEW_TAG_PREFIX + ui_links.CELLS_VIEW])
    assert isinstance(envelope["name"], str) and isinstance(envelope["createdAt"], int)
    return envelope, json.loads(envelope["state"])


def _found(store, experiment_id: str, search_filter: str) -> set[str]:
    return {r.info.run_id for r in mlflow_client(store).search_runs([experiment_id], search_filter)}


def test_the_view_holds_the_newest_tables_cells_with_their_params_and_figures_as_columns(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("viewed", {"sparsity": [0.0, 0.5]})))
    run_sweep(spec, store, scale="smoke", show_progress=False)
    (report,) = overview.refresh(store, spec, "smoke")
    experiment_id = store.find_experiment("viewed")
    envelope, state = _saved_view(store, experiment_id)
    assert envelope["name"] == "viewed (smoke): the newest cells"
    assert state["selectedColumns"] == ["params.`sparsity`", "metrics.`train_time_s`", "metrics.`speedup`",
                                        "metrics.`test_accuracy`", "metrics.`param_count`"]
    assert state["columnOrder"] == ["attributes.`Run Name`", *state["selectedColumns"]]
    assert state["orderByKey"] == "params.`sparsity`" and state["orderByAsc"] is True
    cells = {run.run_id for run in report.runs}
    assert len(cells) == 2 and _found(store, experiment_id, state["searchFilter"]) == cells   # no parent run


def test_a_view_of_many_cells_filters_by_scale(store, sweep_file, monkeypatch):
    """Beyond MAX_LISTED cells the filter names the scale, not each cell: a cell of another scale is
    left out, and so are the parent runs."""
    spec = sweep_spec.load(str(sweep_file("many", {"sparsity": [0.0, 0.5]})))
    run_sweep(spec, store, scale="smoke", show_progress=False, overrides={"sparsity": [0.0]})
    run_sweep(spec, store, scale="quick", show_progress=False, overrides={"sparsity": [0.0], "epochs": "1",
                                                                          "train_limit": "64"})
    monkeypatch.setattr(ui_view, "MAX_LISTED", 0)
    (report,) = overview.refresh(store, spec, "smoke")
    experiment_id = store.find_experiment("many")
    _, state = _saved_view(store, experiment_id)
    assert _found(store, experiment_id, state["searchFilter"]) == {run.run_id for run in report.runs}
