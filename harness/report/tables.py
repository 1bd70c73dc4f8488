"""A sweep's table read back from the tracking store (never from printed logs), set beside the
published figures from its sweep file, written as Markdown, CSV and a PNG plot, and logged to the
sweep's latest parent run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.errors import UserError
from harness.fingerprint import REPO_ROOT, machine_text
from harness.report import checks, machine
from harness.store import Outcome, RunRecord, Store
from harness.store.tracking import CELL_ID, PARENT, SCALE
from harness.sweeps.spec import SweepSpec

FINGERPRINT = "fingerprint"
MFU = "mfu"   # model FLOPs utilisation against the measured peak (harness/flops.py)

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
    fingerprint: str = ""
    verdicts: list[checks.Verdict] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)   # the finished cells the table is made of


def build(store: Store, spec: SweepSpec, scale: str | None = None, fingerprint: str | None = None) -> Report:
    """The table of one scale (default: the latest run's) measured on one machine and software setup
    (default: the newest cell's). Cells from other setups are named, never merged into the table."""
    return build_all(store, spec, scale, fingerprint)[0]


def build_all(store: Store, spec: SweepSpec, scale: str | None = None,
              fingerprint: str | None = None) -> list[Report]:
    """One report per machine/software fingerprint that has finished cells, newest first."""
    experiment_id = store.find_experiment(spec.name)
    parents = store.sweep_runs(experiment_id, spec.name, parents=True) if experiment_id else []
    if not parents:
        raise UserError(f"sweep '{spec.name}' has not been run in {store.uri}; "
                        f"run `make sweep-{spec.name} SCALE=smoke` first.")
    scale = scale or parents[0].tags.get(SCALE, "full")
    parents = [p for p in parents if p.tags.get(SCALE) == scale]
    if not parents:
        raise UserError(f"sweep '{spec.name}' has no run at scale '{scale}'.")
    cells = [r for r in store.sweep_runs(experiment_id, spec.name) if r.tags.get(SCALE) == scale]
    ok = [r for r in cells if r.outcome == Outcome.OK]
    problems = [f"{r.name}: {r.outcome or r.status.lower()}: {r.reason or ''}"
                for r in cells if r.outcome != Outcome.OK]
    if not ok:
        raise UserError(f"sweep '{spec.name}' at scale '{scale}' has no finished cell yet"
                        + (f" ({problems[0]})." if problems else "."))
    groups: dict[str, list] = {}
    for run in ok:  # search results are newest first, so the first group is the newest setup
        groups.setdefault(run.tags.get(FINGERPRINT, "unknown"), []).append(run)
    if fingerprint is not None:
        if fingerprint not in groups:
            raise UserError(f"no finished cell of '{spec.name}' has fingerprint {fingerprint}; "
                            f"known: {', '.join(groups)}.")
        groups = {fingerprint: groups[fingerprint]}
    reports = []
    for key, runs in groups.items():
        notes = list(problems)
        others = [f"{k} ({_machine(r[0])}, {len(r)} cells)" for k, r in groups.items() if k != key]
        if others:
            notes.insert(0, "cells measured on other machines or software are reported separately: "
                         + "; ".join(others))
        report = Report(spec, scale, build_table(spec, runs), notes, _machine(runs[0]), _holding_parent(runs, parents))
        report.fingerprint = key
        report.runs = runs
        finished = report.table["repeats"].fillna(0)
        for _, row in report.table[finished < spec.repeats].astype(object).iterrows():
            label = " ".join(f"{a}={row[a]}" for a in spec.axes())
            report.problems.append(f"{label}: {0 if pd.isna(row['repeats']) else int(row['repeats'])} "
                                   f"of {spec.repeats} repeats finished")
        unfinished = [r for r in cells if r.outcome != Outcome.OK and r.tags.get(FINGERPRINT, "unknown") == key]
        report.verdicts = checks.evaluate(spec.checks, report.table, axes=spec.axes(), scale=scale,
                                          measured=machine.measured_on(runs, unfinished),
                                          machine=spec.published.get("machine", checks.DOCUMENT_MACHINE))
        report.markdown = to_markdown(report, runs[0])
        reports.append(report)
    return reports


def _holding_parent(runs: list[RunRecord], parents: list[RunRecord]) -> str:
    """The parent run that holds the newest of the report's cells: the report's files go there and
    the UI's links point there, never at a later invocation that ran nothing."""
    ids = {p.run_id for p in parents}
    return next((r.tags[PARENT] for r in runs if r.tags.get(PARENT) in ids), parents[0].run_id)


def _machine(run: RunRecord) -> str:
    return machine_text(run.tags)


def build_table(spec: SweepSpec, runs) -> pd.DataFrame:
    """One row per grid point of the finished `runs` (medians over repeats), the derived columns
    (speedup, efficiency) and the published rows' figures beside them as book_* columns."""
    axes = spec.axes()
    metrics = spec.report.get("metrics", ["train_time_s", "test_accuracy"])
    time = spec.report.get("time", "train_time_s")   # the metric speed-ups are computed from
    if MFU not in metrics and any(MFU in run.metrics for run in runs):
        metrics = [*metrics, MFU]   # every training run logs it: shown beside the time (below)
    notes = spec.report.get("notes", [])
    rows = []
    for run in runs:
        row = {a: _number(run.params.get(a)) for a in axes}
        row.update({m: run.metrics.get(m) for m in metrics})
        row[CELL_ID] = run.tags.get(CELL_ID)
        row["note"] = cell_note(notes, run)
        rows.append(row)
    cells = pd.DataFrame(rows)
    for m in metrics:  # a metric no cell logged is all None (object dtype): make it NaN for the medians
        cells[m] = pd.to_numeric(cells[m], errors="coerce")
    # One record per cell_id (the engine's guarantee); repeats of a grid point are grouped here.
    grouped = cells.groupby(axes, sort=True)
    table = grouped[metrics].median()
    table["repeats"] = grouped.size()
    if time in metrics and (time == "train_time_s" or spec.repeats > 1):
        q = grouped[time].quantile([0.25, 0.75]).unstack()
        table[_iqr_name(time)] = q[0.75] - q[0.25]
    if (cells["note"] != "").any():
        table["note"] = grouped["note"].agg(lambda texts: "; ".join(dict.fromkeys(t for t in texts if t)))
    table = table.reset_index()

    baseline = spec.report.get("baseline")
    workers = spec.report.get("workers")  # the field counting workers, for parallel efficiency
    if baseline and time in metrics:
        table["speedup"] = _speedup(table, baseline, time, axes)
        if workers:
            table["efficiency"] = _efficiency(table, baseline, "speedup", workers)
    published = pd.DataFrame(spec.published.get("rows", []))
    if not published.empty:
        published = published.rename(columns={c: f"book_{c}" for c in published.columns if c not in axes})
        on = [a for a in axes if a in published]
        if baseline and f"book_{time}" in published:
            published["book_speedup"] = _speedup(published, baseline, f"book_{time}", on)
            if workers:
                published["book_efficiency"] = _efficiency(published, baseline, "book_speedup", workers)
        table = table.merge(published, on=on, how="outer")
    for axis in axes:  # a merge with published rows turns an integer axis (threads) into floats
        column = table[axis]
        if column.dtype.kind == "f" and column.notna().all() and (column % 1 == 0).all():
            table[axis] = column.astype(int)
    table = _in_grid_order(table, spec, axes)
    ours = [c for c in (time, _iqr_name(time), "speedup", "efficiency", MFU) if c in table]
    ours += [c for c in table.columns if c not in ours and c not in axes and not c.startswith("book_") and c != "note"]
    book = [c for c in (f"book_{time}", "book_speedup", "book_efficiency") if c in table]
    book += [c for c in table.columns if c.startswith("book_") and c not in book]
    tail = ["note"] if "note" in table and table["note"].fillna("").astype(bool).any() else []
    return table[axes + ours + book + tail].reset_index(drop=True)


def cell_figures(report: Report) -> dict[str, dict[str, float]]:
    """Each finished cell's derived figures, by run id: its grid point's `speedup` over the baseline
    and parallel `efficiency`, the numbers the table shows (medians over repeats), so the UI can
    chart and sort cells by them. Empty when the sweep names no baseline."""
    derived = [c for c in ("speedup", "efficiency") if c in report.table]
    if not derived:
        return {}
    axes = report.spec.axes()
    points = {tuple(row[a] for a in axes): row for row in report.table.to_dict("records")}
    figures = {}
    for run in report.runs:
        row = points.get(tuple(_number(run.params.get(a)) for a in axes))
        found = {c: float(row[c]) for c in derived if row is not None and pd.notna(row[c])}
        if found:
            figures[run.run_id] = found
    return figures


def _iqr_name(time: str) -> str:
    return "train_time_iqr_s" if time == "train_time_s" else f"{time.removesuffix('_s')}_iqr_s"


def cell_note(notes: list[dict], run: RunRecord) -> str:
    """The report's note for one cell: the sweep file's [report] notes that apply, then contention."""
    return "; ".join([n["text"] for n in notes if _matches(run, n.get("when", {}))] + _contention(run))


def _contention(run: RunRecord) -> list[str]:
    """A cell timed while other work held the machine's cores (harness/machine_load.py) says so:
    its times are not to be trusted beside the others."""
    if run.metrics.get("contended") != 1:
        return []
    return [f"timed while other work held {run.metrics.get('other_busy_cores', float('nan')):.1f} cores "
            f"(load {run.metrics.get('load_avg_before', float('nan')):.1f} -> "
            f"{run.metrics.get('load_avg_after', float('nan')):.1f})"]


def _matches(run: RunRecord, when: dict) -> bool:
    """A report note applies to a run when every `when` key equals the run's param, tag or metric."""
    for key, want in when.items():
        if key in run.metrics:
            try:
                if run.metrics[key] != float(want):
                    return False
            except (TypeError, ValueError):
                return False
            continue
        have = run.params.get(key, run.tags.get(key))
        if have is None or str(have).lower() != str(want).lower():
            return False
    return True


def _in_grid_order(table: pd.DataFrame, spec: SweepSpec, axes: list[str]) -> pd.DataFrame:
    """Numbers ascending; names (dtype, execution, device) in the order the grid lists them; a
    column that mixes both after the merge with published rows puts numbers first."""
    def key(column: pd.Series) -> pd.Series:
        if pd.api.types.is_numeric_dtype(column):
            return column
        order = {v: i for i, v in enumerate(spec.grid.get(column.name, [])) if not isinstance(v, dict)}
        return column.map(lambda v: (0, order[v], "") if v in order else
                          (1, v, "") if isinstance(v, (int, float)) else (2, 0, str(v)))
    return table.sort_values(axes, key=key)


def _speedup(frame: pd.DataFrame, baseline: dict, column: str, axes: list[str] | None = None) -> pd.Series:
    """Baseline time / each row's time. Axes the baseline does not name (model, backend, lr_scaling)
    each get their own baseline row when they have one (each model against its own eager run),
    else the first matching row."""
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


def _number(text):
    try:
        return float(text) if "." in text or "e" in text else int(text)
    except (TypeError, ValueError):
        return text


def to_markdown(report: Report, sample_run: RunRecord) -> str:
    spec, t = report.spec, report.table
    lines = [f"# {spec.title}", ""] + ([f"Source: {spec.source}", ""] if spec.source else [])
    params = sample_run.params
    if spec.report.get("settings"):  # experiments that are not a training run name what to show
        shown = ", ".join(f"{name} {_setting(sample_run, name)}" for name in spec.report["settings"])
        scale_line = f"- Scale: **{report.scale}** ({shown})."
    else:
        scale_line = (
        f"- Scale: **{report.scale}** (dataset {params.get('dataset')}: "
        f"{sample_run.metrics.get('train_samples', 0):,.0f} train / "
        f"{sample_run.metrics.get('test_samples', 0):,.0f} test images, {params.get('epochs')} timed epochs, "
        f"batch {params.get('batch_size')}, lr {params.get('lr')}, "
        f"{float(sample_run.metrics.get('threads_used', params.get('threads'))):.0f} threads, "
        f"device {params.get('device')}).")
    lines += [
        scale_line,
        f"- Machine: {report.machine} (fingerprint {report.fingerprint}).",
        f"- Clock: {sample_run.tags.get('harness.clock', 'not stated')}.",
    ]
    if spec.published.get("note"):
        lines.append(f"- Published figures: {spec.published['note']}.")
    if "speedup" in t:
        lines.append("- Speed-up: our baseline's time divided by the cell's time (the book's likewise); "
                     "absolute seconds from different hardware are shown, not compared.")
    if MFU in t:
        lines.append("- MFU: training FLOPs per second (counted per step, harness/flops.py) over this machine's "
                     "measured matmul peak in the run's dtype (`harness peak`).")
    lines += [f"- {text}" for text in spec.report.get("comments", [])]
    lines.append("")
    lines.append(_markdown_table(t))
    if report.verdicts:
        lines += ["", "| check | verdict | measured |", "|---|---|---|"]
        lines += [f"| {v.check} | **{v.verdict}** | {v.detail} |" for v in report.verdicts]
    if report.problems:
        lines += ["", "Cells without a result:", *[f"- {p}" for p in report.problems]]
    return "\n".join(lines) + "\n"


def _setting(run: RunRecord, name: str) -> str:
    if name in run.params:
        return run.params[name]
    value = run.metrics.get(name)
    return "?" if value is None else f"{value:g}"


def format_value(column: str, value) -> str:
    """A figure as the report prints it: accuracies and MFU as percents, speed-ups as 1.23x, counts
    with thousands separators, other numbers to 3 significant digits (one decimal from 10 up)."""
    if pd.isna(value):
        return "—"
    if "accuracy" in column:
        return f"{100 * value:.2f}%"
    if column == MFU:
        return f"{100 * value:.1f}%" if value >= 0.001 else f"{100 * value:.2g}%"
    if "param_count" in column or column == "repeats":
        return f"{int(value):,}"
    if "speedup" in column:
        return f"{value:.2f}x"
    if "efficiency" in column:
        return f"{100 * value:.0f}%"
    if isinstance(value, float) and column.startswith("book_") and abs(value) < 10:
        return f"{value:.5g}"  # a published figure as printed (1.0981, 0.0011)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _markdown_table(table: pd.DataFrame) -> str:
    fmt = format_value

    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    # astype(object): iterrows would turn an integer column (threads, batch_size) into floats
    body = ["| " + " | ".join(fmt(c, row[c]) for c in table.columns) + " |"
            for _, row in table.astype(object).iterrows()]
    return "\n".join([header, rule, *body])


def plot(report: Report, path: Path, width_px: int | None = None) -> Path:
    """Our time, speed-up and accuracy against the swept value, the book's beside them; `width_px`
    scales the image to a width (the MLflow UI crops a wider one in an experiment's description)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = report.table
    spec = report.spec
    x = spec.report.get("x", list(spec.grid)[0])
    if spec.report.get("plot") == "twin":
        return _twin_plot(report, x, path, width_px)
    time = spec.report.get("time", "train_time_s")
    # Panels: [ours, published or "", title]; the sweep file may name its own.
    panels = spec.report.get("plots") or [
        [time, "", "our training time (s)" if time == "train_time_s" else f"our {time}"],
        ["speedup", "book_speedup", "speed-up over baseline"],
        ["test_accuracy", "book_test_accuracy", "test accuracy"]]
    panels = [p for p in panels if p[0] in t or (p[1] and p[1] in t)] or panels[:1]
    # One line per combination of the other axes (e.g. per model when x is the execution mode).
    series = spec.report.get("series")  # the axis whose values get a line each (backend, lr_scaling)
    others = [series] if series else [a for a in spec.axes() if a != x and a in t]
    lines = list(t.groupby(others, sort=False)) if others else [((), t)]
    fig, axes = plt.subplots(1, len(panels), figsize=(14 if len(panels) == 3 else 4.7 * len(panels), 4),
                             squeeze=False)
    for ax, (ours, book, title) in zip(axes[0], panels):
        for key, part in lines:
            suffix = "" if not others else " " + " ".join(map(str, key if isinstance(key, tuple) else (key,)))
            if ours in part:
                ax.plot(part[x].astype(str) if part[x].dtype == object else part[x], part[ours], "o-",
                        label=f"ours ({report.scale}){suffix}")
            if book and book in part and part[book].notna().any():
                ax.plot(part[x].astype(str) if part[x].dtype == object else part[x], part[book], "s--",
                        label=f"published{suffix}")
        ax.set_xlabel(x)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(report.spec.title)
    return _save(fig, path, width_px)


def _save(fig, path: Path, width_px: int | None) -> Path:
    import matplotlib.pyplot as plt

    dpi = 110
    if width_px:  # narrower panels at a lower resolution, so the labels stay readable
        dpi = 80
        fig.set_size_inches(width_px / dpi, fig.get_size_inches()[1])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _twin_plot(report: Report, x: str, path: Path, width_px: int | None = None) -> Path:
    """Accuracy and time against the swept value on two y-axes (d2l 12.6's exercise plots)."""
    import matplotlib.pyplot as plt

    t = report.table.dropna(subset=["train_time_s"]).sort_values(x)
    fig, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    left.plot(t[x], t["test_accuracy"], "o-", color="tab:blue", label="test accuracy")
    # d2l's seconds per epoch are a mean over the epochs (its Timer.avg()); older runs logged only the median
    time_column = next(c for c in ("epoch_time_mean_s", "epoch_time_median_s", "train_time_s")
                       if c in t and t[c].notna().any())
    right.plot(t[x], t[time_column], "s--", color="tab:red", label=time_column)
    left.set_xlabel(x)
    left.set_ylabel("test accuracy", color="tab:blue")
    right.set_ylabel(f"{time_column} (s)", color="tab:red")
    left.grid(alpha=0.3)
    fig.suptitle(f"{report.spec.title} ({report.scale})")
    return _save(fig, path, width_px)


def write(report: Report, store: Store, out_dir: Path = REPORTS_DIR, stem_suffix: str = "") -> list[Path]:
    """Write <sweep>.md, .csv and .png, and log them to the sweep's latest parent run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{report.spec.name}{stem_suffix}"
    paths = [stem.with_suffix(".md"), stem.with_suffix(".csv")]
    paths[0].write_text(report.markdown)
    report.table.to_csv(paths[1], index=False)
    paths.append(plot(report, stem.with_suffix(".png")))
    for path in paths:
        store.log_artifact(report.parent_run_id, path, "report")
    return paths
