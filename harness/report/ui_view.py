"""The view of a sweep that `harness ui` links to: MLflow's runs table holding the cells of the
sweep's newest table alone, its grid values and figures as the first columns, ordered by the swept
value, so the first screen compares the cells by their numbers.

MLflow takes such a view by URL only as a saved view: an experiment tag holding the table's state
(columns, their order and widths, the filter, the order of rows) that `viewStateShareKey` names
(harness/ui_links.py). Its Compare page is addressable by URL too, but opens on a plot of one param
and one metric it picks itself, with the params table below the fold; and the runs table's own
URL state (filter, order) leaves the columns at MLflow's defaults (Created, Dataset, Duration,
Source, Models). The state's fields are MLflow's ExperimentPageUIState and search facets
(mlflow/server/js: ExperimentPageUIState.tsx, useSharedExperimentViewState.ts, savedViewEnvelope.ts).
"""

from __future__ import annotations

import json
import time

from harness import ui_links
from harness.machine.machine_load import CONTENDED

MAX_LISTED = 300      # cells named one by one in the filter (an experiment tag holds 20,000 characters)
COLUMN_WIDTH_PX = 104  # MLflow's default of 150 puts the third figure off a 1400 px screen beside its assistant
RUN_NAME_WIDTH_PX = 150


def view_tag(report) -> tuple[str, str]:
    """The experiment tag (key, value) of the view of the report's cells."""
    columns = [*(f"params.`{a}`" for a in _axes(report)), *(f"metrics.`{m}`" for m in _metrics(report))]
    state = {
        "selectedColumns": columns,
        "columnOrder": ["attributes.`Run Name`", *columns],
        "columnWidths": {"attributes.`Run Name`": RUN_NAME_WIDTH_PX, **{c: COLUMN_WIDTH_PX for c in columns}},
        "searchFilter": search_filter(report),
        "orderByKey": columns[0] if columns else "",
        "orderByAsc": True,
    }
    now = int(time.time() * 1000)
    envelope = {"name": f"{report.spec.name} ({report.scale}): the newest cells", "createdAt": now,
                "updatedAt": now, "state": json.dumps(state)}
    return ui_links.VIEW_TAG_PREFIX + ui_links.CELLS_VIEW, json.dumps(envelope)


def search_filter(report) -> str:
    """The report's cells by run id; for a table of more than MAX_LISTED cells, every cell of its
    scale (those of earlier procedures, other machines and settings too; a cell has a cell id, its
    parent run none)."""
    if len(report.runs) <= MAX_LISTED:
        return "attributes.run_id IN (" + ", ".join(f"'{run.run_id}'" for run in report.runs) + ")"
    from harness.store.tracking import CELL_ID, SCALE

    return f"tags.`{SCALE}` = '{report.scale}' AND tags.`{CELL_ID}` LIKE '%'"


def _axes(report) -> list[str]:
    """The swept fields the cells logged as params, in the grid's order."""
    logged = {key for run in report.runs for key in run.params}
    return [a for a in report.spec.axes() if a in logged]


def _metrics(report) -> list[str]:
    """The table's time, its speed-up and efficiency, the sweep's other metrics, and `contended` when
    some cell was: those any cell logged (the report logs the derived ones on the cells)."""
    time_metric = report.spec.report.get("time", "train_time_s")
    wanted = [time_metric, "speedup", "efficiency", *report.spec.report.get("metrics", []), CONTENDED]
    logged = {key for run in report.runs for key in run.metrics}
    derived = {c for c in ("speedup", "efficiency") if c in report.table and report.table[c].notna().any()}
    contended = any(run.metrics.get(CONTENDED) == 1 for run in report.runs)
    return [m for m in dict.fromkeys(wanted)
            if (m in logged or m in derived) and (m != CONTENDED or contended)]
