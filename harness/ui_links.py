"""Links into the MLflow UI, every one of them opening the model-training view.

MLflow 3's UI has a global "GenAI | Model training" switch kept in the browser (GenAI in a fresh
profile), and in the GenAI view an experiment opens on its traces overview, not its runs. The
experiment's `mlflow.experimentKind` tag does not decide it; the `workflowType=machine_learning`
query parameter does (mlflow/server/js: the workflow-type context reads it before the stored
choice), so every link the harness prints or writes carries it.
"""

from __future__ import annotations

WORKFLOW = "workflowType=machine_learning"
# A saved view of an experiment's runs table is an experiment tag, VIEW_TAG_PREFIX + its key; the URL
# names the key in `viewStateShareKey` (mlflow/server/js: useSharedExperimentViewState), and the UI
# lists the view under *Views*. A sweep's report writes the view of its newest cells under this key
# (harness/report/ui_view.py).
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
CELLS_VIEW = "harness-cells"


def runs_table(experiment_id: str, base: str = "") -> str:
    """The experiment's runs table (`base` = http://host:port; empty for a link inside the UI)."""
    return f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW}" if base else \
        f"#/experiments/{experiment_id}/runs?{WORKFLOW}"


def cells_view(experiment_id: str, base: str) -> str:
    """The runs table as the sweep's view of its newest cells (their params and metrics as columns).
    The URL names nothing else of the table's state: MLflow skips a saved view when the URL also
    carries a filter or an order of its own."""
    return f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={CELLS_VIEW}&{WORKFLOW}"


def run_artifact(experiment_id: str, run_id: str, artifact: str, base: str = "") -> str:
    """One artifact of a run, on the run's page."""
    return f"{base}{'/' if base else ''}#/experiments/{experiment_id}/runs/{run_id}/artifacts/{artifact}?{WORKFLOW}"


def experiments_list(base: str) -> str:
    return f"{base}/#/experiments?{WORKFLOW}"
