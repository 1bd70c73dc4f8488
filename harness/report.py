"""A sweep's table read back from the tracking store (never from printed logs), set beside the
published figures from its sweep file, written as Markdown, CSV and a PNG plot, and logged to the
sweep's latest parent run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import UserError
from harness.fingerprint import REPO_ROOT
from harness.sweepspec import SweepSpec
from harness.tracking import CELL_ID, OK, OUTCOME, REASON, SCALE, Store

REPORTS_DIR = REPO_ROOT / "reports"


@dataclass
class Report:
    spec: SweepSpec
    scale: str
    table: pd.DataFrame           # one row per grid point: ours beside the published figures
    problems: list[str]           # cells that failed or were skipped, with their reasons
    machine: str
    parent_run_id: str
    markdown: str = ""


def build(store: Store, spec: SweepSpec, scale: str | None = None) -> Report:
    experiment = store.client.get_experiment_by_name(spec.name)
    parents = store.sweep_runs(experiment.experiment_id, spec.name, parents=True) if experiment else []
    if not parents:
        raise UserError(f"sweep '{spec.name}' has not been run in {store.uri}; "
                        f"run `make sweep-{spec.name} SCALE=smoke` first.")
    scale = scale or parents[0].data.tags.get(SCALE, "full")
    parents = [p for p in parents if p.data.tags.get(SCALE) == scale]
    if not parents:
        raise UserError(f"sweep '{spec.name}' has no run at scale '{scale}'.")
    cells = [r for r in store.sweep_runs(experiment.experiment_id, spec.name) if r.data.tags.get(SCALE) == scale]
    ok = [r for r in cells if r.data.tags.get(OUTCOME) == OK]
    problems = [f"{r.info.run_name}: {r.data.tags.get(OUTCOME, r.info.status.lower())}: "
                f"{r.data.tags.get(REASON, '')}" for r in cells if r.data.tags.get(OUTCOME) != OK]
    if not ok:
        raise UserError(f"sweep '{spec.name}' at scale '{scale}' has no finished cell yet"
                        + (f" ({problems[0]})." if problems else "."))
    machines = sorted({f"{r.data.tags.get('cpu.model')}, {r.data.tags.get('cpu.cores')} cores, "
                       f"GPUs: {r.data.tags.get('gpu.names')}, torch {r.data.tags.get('torch.version')}"
                       for r in ok})
    table = _table(spec, ok)
    report = Report(spec, scale, table, problems, "; ".join(machines), parents[0].info.run_id)
    if len(machines) > 1:
        report.problems.insert(0, f"cells were measured on {len(machines)} different machines or software "
                                  "setups; times are not comparable across them")
    report.markdown = to_markdown(report, ok[0])
    return report


def _table(spec: SweepSpec, runs) -> pd.DataFrame:
    axes = spec.axes()
    metrics = spec.report.get("metrics", ["train_time_s", "test_accuracy"])
    rows = []
    for run in runs:
        row = {a: _number(run.data.params.get(a)) for a in axes}
        row.update({m: run.data.metrics.get(m) for m in metrics})
        row[CELL_ID] = run.data.tags.get(CELL_ID)
        rows.append(row)
    cells = pd.DataFrame(rows)
    # One record per cell_id (the engine's guarantee); repeats of a grid point are grouped here.
    grouped = cells.groupby(axes, sort=True)
    table = grouped[metrics].median()
    table["repeats"] = grouped.size()
    if "train_time_s" in metrics:
        q = grouped["train_time_s"].quantile([0.25, 0.75]).unstack()
        table["train_time_iqr_s"] = q[0.75] - q[0.25]
    table = table.reset_index()

    baseline = spec.report.get("baseline")
    workers = spec.report.get("workers")  # the field counting workers, for parallel efficiency
    if baseline and "train_time_s" in metrics:
        table["speedup"] = _speedup(table, baseline, "train_time_s", axes)
        if workers:
            table["efficiency"] = _efficiency(table, baseline, "speedup", workers)
    published = pd.DataFrame(spec.published.get("rows", []))
    if not published.empty:
        published = published.rename(columns={c: f"book_{c}" for c in published.columns if c not in axes})
        on = [a for a in axes if a in published]
        if baseline and "book_train_time_s" in published:
            published["book_speedup"] = _speedup(published, baseline, "book_train_time_s", on)
            if workers:
                published["book_efficiency"] = _efficiency(published, baseline, "book_speedup", workers)
        table = table.merge(published, on=on, how="outer").sort_values(axes, key=_sortable)
    for axis in axes:  # a merge with published rows turns an integer axis (threads) into floats
        column = table[axis]
        if column.dtype.kind == "f" and column.notna().all() and (column % 1 == 0).all():
            table[axis] = column.astype(int)
    ours = [c for c in ("train_time_s", "train_time_iqr_s", "speedup", "efficiency") if c in table]
    ours += [c for c in table.columns if c not in ours and c not in axes and not c.startswith("book_")]
    book = [c for c in ("book_train_time_s", "book_speedup", "book_efficiency") if c in table]
    book += [c for c in table.columns if c.startswith("book_") and c not in book]
    return table[axes + ours + book].reset_index(drop=True)


def _speedup(frame: pd.DataFrame, baseline: dict, column: str, axes: list[str] | None = None) -> pd.Series:
    """Baseline time / each row's time. Axes the baseline does not name (backend, lr_scaling) each
    get their own baseline row when they have one, else the first matching row."""
    mask = pd.Series(True, index=frame.index)
    for key, value in baseline.items():
        mask &= frame[key] == value
    if not mask.any():
        return pd.Series(float("nan"), index=frame.index)
    result = frame.loc[mask, column].iloc[0] / frame[column]
    others = [a for a in (axes or []) if a not in baseline and a in frame]
    for _, group in (frame.groupby(others, dropna=False) if others else []):
        base = group.loc[mask[group.index], column]
        if len(base):
            result[group.index] = base.iloc[0] / group[column]
    return result


def _efficiency(frame: pd.DataFrame, baseline: dict, speedup: str, workers: str) -> pd.Series:
    """Parallel efficiency: speed-up divided by how many times the baseline's workers a row has."""
    base_workers = baseline.get(workers, 1)
    return frame[speedup] / (frame[workers] / base_workers)


def _sortable(column: pd.Series) -> pd.Series:
    """Sort numbers as numbers and text as text within a column that mixes them after a merge."""
    return column.map(lambda v: (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))


def _number(text):
    try:
        return float(text) if "." in text or "e" in text else int(text)
    except (TypeError, ValueError):
        return text


def to_markdown(report: Report, sample_run) -> str:
    spec, t = report.spec, report.table
    lines = [f"# {spec.title}", "", f"Source: {spec.source}", ""]
    params = sample_run.data.params
    lines += [
        f"- Scale: **{report.scale}** (dataset {params.get('dataset')}: "
        f"{sample_run.data.metrics.get('train_samples', 0):,.0f} train / "
        f"{sample_run.data.metrics.get('test_samples', 0):,.0f} test images, {params.get('epochs')} timed epochs, "
        f"batch {params.get('batch_size')}, lr {params.get('lr')}, "
        f"{sample_run.data.metrics.get('threads_used', params.get('threads')):.0f} threads, "
        f"device {params.get('device')}).",
        f"- Machine: {report.machine}.",
        f"- Clock: {sample_run.data.tags.get('harness.clock', 'not stated')}.",
    ]
    if spec.published.get("note"):
        lines.append(f"- Published figures: {spec.published['note']}.")
    lines += ["- Speed-up: our baseline's time divided by the cell's time (the book's likewise); "
              "absolute seconds from different hardware are shown, not compared.", ""]
    lines.append(_markdown_table(t))
    if report.problems:
        lines += ["", "Cells without a result:", *[f"- {p}" for p in report.problems]]
    return "\n".join(lines) + "\n"


def _markdown_table(table: pd.DataFrame) -> str:
    def fmt(column: str, value) -> str:
        if pd.isna(value):
            return "—"
        if "accuracy" in column:
            return f"{100 * value:.2f}%"
        if "param_count" in column or column == "repeats":
            return f"{int(value):,}"
        if "speedup" in column:
            return f"{value:.2f}x"
        if "efficiency" in column:
            return f"{100 * value:.0f}%"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    # astype(object): iterrows would turn an integer column (threads, batch_size) into floats
    body = ["| " + " | ".join(fmt(c, row[c]) for c in table.columns) + " |"
            for _, row in table.astype(object).iterrows()]
    return "\n".join([header, rule, *body])


def plot(report: Report, path: Path) -> Path:
    """Our time, speed-up and accuracy against the swept value, the book's beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = report.table
    x = report.spec.report.get("x", list(report.spec.grid)[0])
    if report.spec.report.get("plot") == "twin":
        return _twin_plot(report, x, path)
    series = report.spec.report.get("series")  # one line per value of this axis (backend, lr_scaling)
    groups = [(f" {series}={k}", g.sort_values(x)) for k, g in t.groupby(series)] if series else [("", t)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = [("train_time_s", None, "our training time (s)"),
              ("speedup", "book_speedup", "speed-up over baseline"),
              ("test_accuracy", "book_test_accuracy", "test accuracy")]
    for ax, (ours, book, title) in zip(axes, panels):
        for suffix, g in groups:
            if ours in g and g[ours].notna().any():
                ax.plot(g[x], g[ours], "o-", label=f"ours ({report.scale}){suffix}")
            if book and book in g and g[book].notna().any():
                ax.plot(g[x], g[book], "s--", label=f"published{suffix}")
        ax.set_xlabel(x)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(report.spec.title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _twin_plot(report: Report, x: str, path: Path) -> Path:
    """Accuracy and time against the swept value on two y-axes (d2l 12.6's exercise plots)."""
    import matplotlib.pyplot as plt

    t = report.table.dropna(subset=["train_time_s"]).sort_values(x)
    fig, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    left.plot(t[x], t["test_accuracy"], "o-", color="tab:blue", label="test accuracy")
    time_column = "epoch_time_median_s" if "epoch_time_median_s" in t else "train_time_s"
    right.plot(t[x], t[time_column], "s--", color="tab:red", label=time_column)
    left.set_xlabel(x)
    left.set_ylabel("test accuracy", color="tab:blue")
    right.set_ylabel(f"{time_column} (s)", color="tab:red")
    left.grid(alpha=0.3)
    fig.suptitle(f"{report.spec.title} ({report.scale})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(report: Report, store: Store, out_dir: Path = REPORTS_DIR) -> list[Path]:
    """Write <sweep>.md, .csv and .png, and log them to the sweep's latest parent run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / report.spec.name
    paths = [stem.with_suffix(".md"), stem.with_suffix(".csv")]
    paths[0].write_text(report.markdown)
    report.table.to_csv(paths[1], index=False)
    paths.append(plot(report, stem.with_suffix(".png")))
    for path in paths:
        store.client.log_artifact(report.parent_run_id, str(path), "report")
    return paths
