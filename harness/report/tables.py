"""A sweep's table read back from the tracking store (never from printed logs), set beside the
published figures from its sweep file, with the figures it derives for each cell. It is written as
Markdown by render.py, plotted by plots.py, written to files by report_files.py, and put back into
the store by writeback.py."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.errors import UserError
from harness.machine.fingerprint import FINGERPRINT, machine_text
from harness.report import checks, contention, intervals, measured_on, render
from harness.report.intervals import iqr
from harness.report.render import MFU
from harness.rerun import Rerun, of_parent
from harness.store import Outcome, RunRecord, Store, redact
from harness.store.tracking import CELL_ID, NOTE_PREFIX, PARENT, PROCEDURE, SCALE
from harness.specs.sweep_spec import SweepSpec
from harness.fields.config import SEEDED_ROUNDS_FROM

# What a table's MFU is computed from, kept in its CSV so a reader can recompute it:
# mfu = flops_per_sample * mfu_samples / mfu_time_s / (peak_devices * the peak under peak_key).
MFU_INPUTS = ("flops_per_sample", "mfu_samples", "mfu_time_s", "peak_devices", "peak_tflops", "mfu_invalid")
MFU_TEXTS = ("peak_key", "peak_measured", "mfu_na", "mfu_invalid_reason")   # tags (harness.note.*)


@dataclass
class Report:
    spec: SweepSpec
    scale: str
    table: pd.DataFrame           # one row per grid point: ours beside the published figures
    problems: list[str]           # cells that failed or were skipped, with their reasons
    machine: str
    parent_run_id: str
    left_out: list[str] = field(default_factory=list)   # finished cells kept out of this table, and why
    markdown: str = ""
    fingerprint: str = ""
    variant: str = ""             # the fixed settings that set this table apart ("": the only one)
    drift: str | None = None      # its cells ran at different speed_index (harness/machine/calibration.py)
    verdicts: list[checks.Verdict] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)   # the finished cells the table is made of
    rerun: Rerun | None = None   # the command that measured its newest cells, for the hints it prints


def build(store: Store, spec: SweepSpec, scale: str | None = None, fingerprint: str | None = None) -> Report:
    """The table of one scale (default: the latest run's) measured on one machine and software setup
    (default: the newest cell's). Cells from other setups are named, never merged into the table."""
    return build_all(store, spec, scale, fingerprint)[0]


def build_all(store: Store, spec: SweepSpec, scale: str | None = None,
              fingerprint: str | None = None) -> list[Report]:
    """One report per machine/software fingerprint and per set of fixed settings that has finished
    cells, newest first: a row's repeats are cells whose configuration differs only in `repeat`."""
    experiment_id = store.find_experiment(spec.name)
    parents = store.sweep_runs(experiment_id, spec.name, parents=True) if experiment_id else []
    if not parents:
        raise UserError(f"sweep '{spec.name}' has not been run in {redact(store.uri)}; "
                        f"run `make sweep-{spec.name} SCALE=smoke` first.")
    scale = scale or parents[0].tags.get(SCALE, "full")
    parents = [p for p in parents if p.tags.get(SCALE) == scale]
    if not parents:
        raise UserError(f"sweep '{spec.name}' has no run at scale '{scale}'.")
    cells, superseded = current_procedure([r for r in store.sweep_runs(experiment_id, spec.name)
                                           if r.tags.get(SCALE) == scale])
    ok = [r for r in cells if r.outcome == Outcome.OK]
    problems = [f"{r.name}: {r.outcome or r.status.lower()}: {r.reason or ''}"
                for r in cells if r.outcome != Outcome.OK]
    if not ok:
        raise UserError(f"sweep '{spec.name}' at scale '{scale}' has no finished cell yet"
                        + (f" ({problems[0]})." if problems else "."))
    by_machine: dict[str, list] = {}
    for run in ok:  # search results are newest first, so the first group is the newest setup
        by_machine.setdefault(run.tags.get(FINGERPRINT, "unknown"), []).append(run)
    if fingerprint is not None:
        if fingerprint not in by_machine:
            raise UserError(f"no finished cell of '{spec.name}' has fingerprint {fingerprint}; "
                            f"known: {', '.join(by_machine)}.")
        by_machine = {fingerprint: by_machine[fingerprint]}
    reports = []
    for key, machine_runs in by_machine.items():
        variants = settings_groups(spec, machine_runs)
        older = [f"{superseded[key]} cells measured on this machine under an earlier measurement procedure: "
                 f"this table is procedure {procedure_of(machine_runs[0])}'s alone "
                 f"(harness/fields/config.py)."] if superseded.get(key) else []
        for variant, runs in variants.items():
            holding = _holding_parent(runs, parents)
            params = next((p.params for p in parents if p.run_id == holding), None)
            report = _report(spec, scale, key, variant, runs, by_machine, variants, cells, problems, older, holding,
                             of_parent(spec, scale, params, store.uri))
            reports.append(report)
    return reports


def procedure_of(run: RunRecord) -> int:
    """The MEASUREMENT_PROCEDURE a cell was measured under (0: before cells were tagged with it)."""
    return int(_number(run.tags.get(PROCEDURE, "0")) or 0)


def current_procedure(cells: list[RunRecord]) -> tuple[list[RunRecord], dict[str, int]]:
    """The cells of each machine that were measured under its newest procedure, and how many older
    ones they replace. A procedure changes what a cell means (from 4 on, round r trains seed base + r;
    before, every round trained one seed), so a resumed sweep measures its cells again and the
    table is made of the new ones alone: old and new cells in one row would pass one training off
    as several seeds. Cells of an older procedure stay in the store and are counted in a note."""
    newest: dict[str, int] = {}
    for run in cells:
        if run.outcome == Outcome.OK:
            key = run.tags.get(FINGERPRINT, "unknown")
            newest[key] = max(newest.get(key, 0), procedure_of(run))
    kept, superseded = [], {}
    for run in cells:
        key = run.tags.get(FINGERPRINT, "unknown")
        if procedure_of(run) < newest.get(key, 0):
            superseded[key] = superseded.get(key, 0) + 1
        else:
            kept.append(run)
    return kept, superseded


def _report(spec: SweepSpec, scale: str, key: str, variant: str, runs: list[RunRecord],
            by_machine: dict[str, list], variants: dict[str, list], cells: list[RunRecord],
            problems: list[str], older: list[str], parent_run_id: str, command: Rerun) -> Report:
    left_out = []
    if len(variants) > 1:
        left_out.append("cells run with other fixed settings are reported as separate tables: "
                        + "; ".join(f"{v or 'the sweep file as written'} ({len(r)} cells)"
                                    for v, r in variants.items() if v != variant))
    others = [f"{k} ({_machine(r[0])}, {len(r)} cells)" for k, r in by_machine.items() if k != key]
    if others:
        left_out.append("cells measured on other machines or software are reported separately: " + "; ".join(others))
    report = Report(spec, scale, build_table(spec, runs, scale=scale), list(problems), _machine(runs[0]),
                    parent_run_id, left_out + older)
    report.fingerprint, report.variant, report.runs, report.rerun = key, variant, runs, command
    report.drift = drift_note(runs, command.sweep_command("--remeasure-drifted"))
    finished = report.table["repeats"].fillna(0) + report.table.get(contention.LEFT_OUT, 0)
    for _, row in report.table[finished < spec.repeats_at(scale)].astype(object).iterrows():
        label = " ".join(f"{a}={row[a]}" for a in spec.axes())
        if pd.isna(row["repeats"]) and _listed(report.problems, label):
            continue   # its cell is named with its reason already: once is enough
        report.problems.append(f"{label}: {0 if pd.isna(row['repeats']) else int(row['repeats'])} "
                               f"of {spec.repeats_at(scale)} repeats finished")
    unfinished = [r for r in cells if r.outcome != Outcome.OK and r.tags.get(FINGERPRINT, "unknown") == key]
    report.verdicts = checks.evaluate(spec.checks, report.table, axes=spec.axes(), scale=scale,
                                      measured=measured_on.measured_on(runs, unfinished),
                                      machine=spec.published.get("machine", checks.DOCUMENT_MACHINE),
                                      repeats=spec.repeats_at(scale), settings=cell_settings(runs))
    report.markdown = render.to_markdown(report, runs[0])
    return report


def cell_settings(runs: list[RunRecord]) -> dict[str, set[str]]:
    """Every param of the cells with the values they ran (the settings a check `assumes`)."""
    found: dict[str, set[str]] = {}
    for run in runs:
        for key, value in run.params.items():
            found.setdefault(key, set()).add(value)
    return found


def _listed(problems: list[str], label: str) -> bool:
    """Whether a cell of the grid point `label` ("a=1 b=x") already has a line in `problems`."""
    want = set(label.split())
    return any(want <= set(p.split(": ", 1)[0].split()) for p in problems)


def _holding_parent(runs: list[RunRecord], parents: list[RunRecord]) -> str:
    """The parent run that holds the newest of the report's cells: the report's files go there and
    the UI's links point there, never at a later invocation that ran nothing."""
    ids = {p.run_id for p in parents}
    return next((r.tags[PARENT] for r in runs if r.tags.get(PARENT) in ids), parents[0].run_id)


def _machine(run: RunRecord) -> str:
    return machine_text(run.tags)


def settings_of(run: RunRecord, axes: list[str]) -> dict[str, str]:
    """What a cell fixed besides its grid point and its repeat: its params that are not the
    config's defaults (a param an older cell did not log counts as its default)."""
    import experiments

    fields = experiments.all_fields()
    params = dict(run.params)
    if "seed" in params:
        params["seed"] = str(base_seed(run))
    return {k: v for k, v in sorted(params.items())
            if k not in axes and k != "repeat" and not (k in fields and v == str(fields[k].default))}


def base_seed(run: RunRecord):
    """The seed a cell's sweep was given: its own seed less its round from procedure 4 on (round r
    trains seed base + r), its own seed before (every round trained it). Rows group by it, so the
    rounds of one sweep are repeats of one setting, not settings of their own."""
    seed = _number(run.params.get("seed", "0"))
    seeded_rounds = procedure_of(run) >= SEEDED_ROUNDS_FROM
    if not seeded_rounds or not isinstance(seed, int):
        return seed
    return seed - int(_number(run.params.get("repeat", "0")) or 0)


def settings_groups(spec: SweepSpec, runs: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """The runs split by their fixed settings, newest group first; each group is named by the
    settings that set it apart from the others ("" when there is only one)."""
    axes = spec.axes()
    groups: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(tuple(settings_of(run, axes).items()), []).append(run)
    if len(groups) == 1:
        return {"": runs}
    import experiments

    fields = experiments.all_fields()
    shared = set.intersection(*(set(k) for k in groups))
    named = {}
    for key, members in groups.items():
        differs = dict(kv for kv in key if kv not in shared)
        for k in sorted({k for other in groups for k, _ in other if k not in dict(key)}):
            differs[k] = str(fields[k].default) if k in fields else "unset"   # at its default
        text = ", ".join(f"{k}={v}" for k, v in sorted(differs.items()))
        named[text or "the sweep file as written"] = members
    return named


def drift_note(runs: list[RunRecord], remeasure: str) -> str | None:
    """A sentence when the table's cells were measured at different speeds (their `speed_index`,
    harness/machine/calibration.py, apart by more than the index's own noise), saying where: between
    rounds, which a speed-up paired by round divides out (both rows of a round saw the same speed), or
    within a round, which it does not, with `remeasure`, the command that measures those cells again.
    A calibration taken under load is compared with none."""
    from harness.machine import calibration
    from harness.machine.calibration import DRIFT_TOLERANCE, SPEED_INDEX_WORDS

    taken = [(r.params.get("repeat", "0"), calibration.of(r.metrics)) for r in runs]
    found = [(key, c.index) for key, c in taken if c is not None and not c.under_load]
    loaded = sum(c is not None and c.under_load for _, c in taken)
    if len(found) < 2:
        return None
    values = [v for _, v in found]
    low, high = min(values), max(values)
    if high / low - 1 <= DRIFT_TOLERANCE:
        return None
    rounds: dict[str, list[float]] = {}
    for key, value in found:
        rounds.setdefault(key, []).append(value)
    shown = ", ".join(f"round {key}: {_range_text(v)}" for key, v in sorted(rounds.items(), key=lambda kv: int(kv[0])))
    text = (f"the cells were measured at {SPEED_INDEX_WORDS} {low:.3g} to {high:.3g} ({high / low - 1:.0%} apart, "
            f"more than the {DRIFT_TOLERANCE:.0%} two calibrations of one idle machine stay within; {shown}"
            + (f"; {loaded} cell(s) whose calibration ran under load are not compared" if loaded else "") + ")")
    within = {key: max(v) / min(v) - 1 for key, v in rounds.items() if max(v) / min(v) - 1 > DRIFT_TOLERANCE}
    # The index is read as a sweep invocation starts and as each later round starts, and every cell of
    # the round logs that reading: a round read once cannot show whether the speed moved inside it.
    read_once = all(len(set(v)) == 1 for v in rounds.values())
    if not within and read_once:
        return (text + ": the speed moved between rounds; it is read once a round, so whether it moved within a "
                "round is not measured. A speed-up is formed over the rounds both rows share, so a move between "
                "rounds does not enter it (one within a round would, unseen); a row's median time over rounds "
                "does mix the speeds")
    if not within:
        return (text + ": the speed moved between rounds, not within one (the rounds read more than once stayed "
                "within the tolerance), and a speed-up is formed over the rounds both rows share, each row of a "
                "round at that round's speed, so the drift does not enter it; a row's median time over rounds "
                "does mix the speeds")
    return (text + ": within round(s) " + ", ".join(sorted(within, key=int)) + " the cells ran at speeds "
            + ", ".join(f"{d:.0%}" for _, d in sorted(within.items(), key=lambda kv: int(kv[0])))
            + " apart, so a speed-up over such a round divides times taken at different speeds; "
            f"`{remeasure}` measures again the cells away from today's speed")


def _range_text(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}-{high:.3g}"


NOT_RUN = "not run"
# Where a speed-up is formed over fewer rounds than its baseline row has: the baseline's median time
# over the rounds the two share (the time actually divided), and how many those are.
PAIRED_BASELINE, PAIRED_ROUNDS = "paired_baseline_time_s", "paired_rounds"


def build_table(spec: SweepSpec, runs, scale: str | None = None) -> pd.DataFrame:
    """One row per grid point of the finished `runs` (medians over repeats), the derived columns
    (speedup, efficiency, with their 95% intervals as `_lo`/`_hi`) and the published rows' figures
    beside them as book_* columns. With `scale`, the grid points of that scale no cell finished are
    rows too, noted "not run". The cells' own values stay in `table.attrs["rounds"]` (the checks'
    intervals need them)."""
    axes = spec.axes()
    time = spec.report.get("time", "train_time_s")   # the metric speed-ups are computed from
    metrics = _metrics_read(spec, runs)
    cells, left_out = contention.without_contended_repeats(_cells(spec, runs, axes, metrics), axes)
    # The shown medians and speed-ups keep a contended row's times (marked "contended, not judged");
    # the checks' rounds and resampled tables never hold them.
    timed = contention.times_blanked(cells, [m for m in metrics if m == time or checks.is_timing(m)])
    table = _medians(cells, axes, metrics, time)
    if scale is not None:
        table = _with_unrun_points(spec, scale, table, axes)
    baseline = spec.report.get("baseline")
    workers = spec.report.get("workers")  # the field counting workers, for parallel efficiency
    if baseline and time in metrics:
        rounds = {tuple(k if isinstance(k, tuple) else (k,)): dict(zip(g["repeat"], g[time]))
                  for k, g in cells.dropna(subset=[time]).groupby(axes, sort=False)}
        _speedup_with_interval(table, baseline, time, axes, rounds)
        if workers:
            _cut_at_workers(table, baseline, workers)
            for suffix in ("", "_lo", "_hi"):
                table["efficiency" + suffix] = _efficiency(table, baseline, "speedup" + suffix, workers)
    table = _in_grid_order(_with_published(table, spec, axes, time), spec, axes)
    table = table[_column_order(table, axes, time)].reset_index(drop=True)
    contention.mark(table, cells, axes, left_out, _baseline_rows(table, baseline, axes) if baseline else {})
    table.attrs["rounds"] = intervals.Rounds(timed[[*axes, "repeat", *metrics]].copy(),
                                             _replicates(table, timed, axes, metrics, time, baseline, workers))
    table.attrs["time"] = time
    if cells["test_samples"].notna().any():
        table.attrs["test_samples"] = float(cells["test_samples"].median())
    return table


def _metrics_read(spec: SweepSpec, runs) -> list[str]:
    """The metrics the table reads of each cell: the sweep's, the MFU where the cells logged it
    (every training run does: shown beside the time), and what the MFU is computed from."""
    metrics = spec.report.get("metrics", ["train_time_s", "test_accuracy"])
    if MFU not in metrics and any(MFU in run.metrics or "mfu_invalid" in run.metrics for run in runs):
        metrics = [*metrics, MFU]
    return [*metrics, *_mfu_inputs(runs, metrics)]


def _cells(spec: SweepSpec, runs, axes: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per finished cell: its grid point, repeat, metrics, id, MFU texts and note."""
    notes = spec.report.get("notes", [])
    rows = []
    for run in runs:
        row = {a: _number(run.params.get(a)) for a in axes}
        row.update({m: run.metrics.get(m) for m in metrics})
        row["repeat"] = int(_number(run.params.get("repeat", "0")) or 0)
        row["seed"] = _number(run.params.get("seed", "0"))
        row["test_samples"] = run.metrics.get("test_samples")
        row["target_reached"] = run.metrics.get("target_reached")   # 0: no time to accuracy, as none was
        row[CELL_ID] = run.tags.get(CELL_ID)
        row.update(_mfu_texts(run))
        row["note"] = cell_note(notes, run)
        row[contention.CONTENDED] = float(run.metrics.get(contention.CONTENDED) == 1)
        rows.append(row)
    cells = pd.DataFrame(rows)
    for m in [*metrics, "test_samples", "target_reached"]:  # a metric no cell logged is all None: NaN for the medians
        cells[m] = pd.to_numeric(cells[m], errors="coerce")
    return cells


def _medians(cells: pd.DataFrame, axes: list[str], metrics: list[str], time: str) -> pd.DataFrame:
    """One row per grid point: the medians over its repeats, how many there are, the time's IQR,
    and the cells' notes and MFU texts joined."""
    # One record per cell_id (the engine's guarantee); repeats of a grid point are grouped here.
    grouped = cells.groupby(axes, sort=True)
    table = grouped[metrics].median()
    table["repeats"] = grouped.size()
    if cells["target_reached"].notna().any():
        table["target_reached"] = grouped["target_reached"].max()   # 1 when any repeat reached it
    if time in metrics:
        table[_iqr_name(time)] = grouped[time].agg(iqr)   # NaN (printed "-") for one repeat
    _accuracy_over_seeds(table, cells, axes, [m for m in metrics if checks.is_accuracy(m)])
    if (cells["note"] != "").any():
        table["note"] = grouped["note"].agg(lambda texts: "; ".join(dict.fromkeys(t for t in texts if t)))
    for text in MFU_TEXTS:
        if text in cells and cells[text].notna().any():
            table[text] = grouped[text].agg(lambda texts: " | ".join(dict.fromkeys(t for t in texts if isinstance(t, str))))
    return table.reset_index()


def _with_published(table: pd.DataFrame, spec: SweepSpec, axes: list[str], time: str) -> pd.DataFrame:
    """The published rows' figures beside ours as book_* columns (with the book's speed-up and
    efficiency derived as ours are)."""
    baseline, workers = spec.report.get("baseline"), spec.report.get("workers")
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
    return table


def _column_order(table: pd.DataFrame, axes: list[str], time: str) -> list[str]:
    """The axes, ours (the intervals' bounds last, the Markdown shows them inside their column), the
    book's, and the note when a row has one."""
    ours = [c for c in (time, _iqr_name(time), "speedup", "efficiency", MFU) if c in table]
    bounds = [c for c in ("speedup_lo", "speedup_hi", "efficiency_lo", "efficiency_hi") if c in table]
    bounds += [c for c in table.columns if c.endswith(("_lo", "_hi")) and c not in bounds and c not in axes
               and not c.startswith("book_")]
    ours += [c for c in table.columns if c not in ours + bounds and c not in axes and not c.startswith("book_")
             and c != "note"]
    ours += bounds
    book = [c for c in (f"book_{time}", "book_speedup", "book_efficiency") if c in table]
    book += [c for c in table.columns if c.startswith("book_") and c not in book]
    tail = ["note"] if "note" in table and table["note"].fillna("").astype(bool).any() else []
    return axes + ours + book + tail


def _accuracy_over_seeds(table: pd.DataFrame, cells: pd.DataFrame, axes: list[str], accuracies: list[str]) -> None:
    """`seeds`: how many seeds each grid point's cells trained, and for each accuracy its 95% interval
    over them (`_lo`/`_hi`, harness/report/intervals.py). A row of one seed (its repeats timed the
    same training again) has no interval: its accuracy is one draw, and the report says so."""
    if not accuracies:
        return
    grouped = cells.groupby(axes, sort=True)
    table["seeds"] = grouped["seed"].nunique()
    for metric in accuracies:
        found = {key: intervals.median_interval(group.groupby("seed")[metric].median())
                 if group["seed"].nunique() > 1 else (np.nan, np.nan, np.nan) for key, group in grouped}
        lo, hi = intervals.bounds(metric)
        keys = [key if isinstance(key, tuple) else (key,) for key in table.index]
        # an accuracy is a fraction: the interval's t-scaled spread can reach past 0 or 1 on few, far
        # apart seeds (0.095, 0.140, 0.203), and is cut there rather than printed as -2.5%
        table[lo] = [max(found[key][1], 0.0) for key in keys]
        table[hi] = [min(found[key][2], 1.0) for key in keys]


REPLICATES = 400   # resampled tables a trend, flat or best timing check is judged on


def _replicates(table: pd.DataFrame, cells: pd.DataFrame, axes: list[str], metrics: list[str], time: str,
                baseline: dict | None, workers: str | None) -> dict[str, np.ndarray]:
    """Each metric's column of the table recomputed on REPLICATES resamples of the rounds (whole
    rounds drawn with replacement, the same ones for every row), shape (REPLICATES, rows); with the
    speed-up and efficiency derived from each resampled time. Empty with fewer than two rounds."""
    rounds = sorted(cells["repeat"].unique())
    if len(rounds) < 2:
        return {}
    position = {r: j for j, r in enumerate(rounds)}
    keys = [tuple(row) for row in table[axes].itertuples(index=False)]
    row_of = {k: i for i, k in enumerate(keys)}
    rng = np.random.default_rng(intervals.SEED)
    pick = rng.integers(0, len(rounds), (REPLICATES, len(rounds)))
    found = {}
    for metric in metrics:
        grid = np.full((len(keys), len(rounds)), np.nan)
        for _, cell in cells.iterrows():
            i = row_of.get(tuple(cell[a] for a in axes))
            if i is not None:
                grid[i, position[cell["repeat"]]] = cell[metric]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # a row without a value in the drawn rounds
            found[metric] = np.nanmedian(grid[:, pick], axis=2).T
    if baseline and time in found:
        base = _baseline_rows(table, baseline, axes)
        if base:
            order = [base.get(i, i) for i in range(len(keys))]
            found["speedup"] = found[time][:, order] / found[time]
            if workers and workers in table:
                ratio = (table[workers] / baseline.get(workers, 1)).to_numpy(dtype=float)
                found["efficiency"] = found["speedup"] / ratio
    return found


def _with_unrun_points(spec: SweepSpec, scale: str, table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """The grid points of the scale that no finished cell has, as rows noted "not run"."""
    from harness.specs.sweep_spec import expand

    try:
        planned = expand(spec, scale, repeats=1)
    except Exception:  # a grid that cannot be expanded here (a model this build lacks): the runs alone
        return table
    have = {tuple(_number(str(v)) for v in row) for row in table[axes].itertuples(index=False)}
    missing = []
    for cell in planned:
        if cell.config is None:
            continue
        point = tuple(getattr(cell.config, a) for a in axes)
        if tuple(_number(str(v)) for v in point) not in have:
            have.add(tuple(_number(str(v)) for v in point))
            missing.append({**dict(zip(axes, point)), "note": NOT_RUN})
    if not missing:
        return table
    if "note" not in table:
        table["note"] = ""
    return pd.concat([table, pd.DataFrame(missing)], ignore_index=True)


def _speedup_with_interval(table: pd.DataFrame, baseline: dict, time: str, axes: list[str],
                           rounds: dict[tuple, dict[int, float]]) -> None:
    """`speedup` = the baseline's median time / the row's, with `speedup_lo`/`speedup_hi`, its 95%
    interval over the rounds (harness/report/intervals.py). The baseline row is found as _speedup does."""
    base_rows = _baseline_rows(table, baseline, axes)
    values = {"speedup": [], "speedup_lo": [], "speedup_hi": [], PAIRED_BASELINE: [], PAIRED_ROUNDS: []}
    for i in table.index:
        base = base_rows.get(i)
        point = tuple(table.at[i, a] for a in axes)
        paired_time, paired_rounds = float("nan"), float("nan")
        if base is None or point not in rounds:
            ratio = intervals.Ratio(float("nan"), float("nan"), float("nan"), 0, False)
        elif base == i:
            ratio = intervals.Ratio(1.0, float("nan"), float("nan"), len(rounds[point]), True)
        elif tuple(table.at[base, a] for a in axes) not in rounds:   # a baseline with no time
            ratio = intervals.Ratio(float("nan"), float("nan"), float("nan"), 0, False)
        else:
            base_rounds = rounds[tuple(table.at[base, a] for a in axes)]
            ratio = intervals.ratio_of_medians(base_rounds, rounds[point])
            shared = set(base_rounds) & set(rounds[point])
            if ratio.paired and len(shared) < len(base_rounds):   # the baseline row's median is not the one divided
                paired_time = intervals.median(base_rounds[k] for k in shared)
                paired_rounds = len(shared)
        values["speedup"].append(ratio.value)
        values["speedup_lo"].append(ratio.lo)
        values["speedup_hi"].append(ratio.hi)
        values[PAIRED_BASELINE].append(paired_time)
        values[PAIRED_ROUNDS].append(paired_rounds)
    if all(pd.isna(v) for v in values[PAIRED_BASELINE]):
        del values[PAIRED_BASELINE], values[PAIRED_ROUNDS]
    for column, found in values.items():
        table[column] = found


def _cut_at_workers(table: pd.DataFrame, baseline: dict, workers: str) -> None:
    """A row with k times the baseline's workers (devices, processes, threads) cannot run more than k
    times as fast: its speed-up's interval, symmetric in the log around a ratio near k, is cut at k
    (the efficiency's at 100%), as an accuracy's is at 1. The point value is left as measured: one
    above k is an error the checks' `max` fails, never a figure to hide."""
    if workers not in table:
        return
    bound = table[workers] / baseline.get(workers, 1)
    for column in ("speedup_lo", "speedup_hi"):
        table[column] = table[column].where(~(table[column] > bound), bound)


def _baseline_rows(frame: pd.DataFrame, baseline: dict, axes: list[str]) -> dict:
    """Each row's baseline row (an index of `frame`): within its group of the axes the baseline does
    not name when that group has one, else the first baseline row."""
    mask = pd.Series(True, index=frame.index)
    for key, value in baseline.items():
        mask &= frame[key] == value
    mask &= frame.get("repeats", pd.Series(1, index=frame.index)).notna()
    if not mask.any():
        return {}
    first = frame.index[mask][0]
    found = {i: first for i in frame.index}
    others = [a for a in axes if a not in baseline and a in frame]
    for _, group in (frame.groupby(others, dropna=False) if others else []):
        base = group.index[mask[group.index]]
        if len(base):
            found.update({i: base[0] for i in group.index})
    return found


def _mfu_inputs(runs, shown: list[str]) -> list[str]:
    """The MFU's inputs the cells logged, as table columns (the CSV keeps them; see MFU_INPUTS)."""
    return [m for m in MFU_INPUTS if m not in shown and any(m in run.metrics for run in runs)]


def _mfu_texts(run: RunRecord) -> dict[str, str]:
    """The MFU's text inputs of a cell: the peak's key and how it was measured, or why there is none."""
    return {k: run.tags[f"{NOTE_PREFIX}{k}"] for k in MFU_TEXTS if f"{NOTE_PREFIX}{k}" in run.tags}


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
    """The report's note for one cell: the sweep file's [report] notes that apply. (Contention is
    said once per table, render.py, not on each cell.)"""
    return "; ".join(n["text"] for n in notes if _matches(run, n.get("when", {})))


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
        if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            return column
        listed = [v for values in spec.grid.values() for v in values if isinstance(v, dict) and column.name in v]
        listed = [v[column.name] for v in listed] or spec.grid.get(column.name, [])
        order = {}
        for v in listed:   # a compound axis lists a value once per combination: its first place counts
            if not isinstance(v, dict):
                order.setdefault(v, len(order))
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
    if text in ("True", "False"):   # a bool field as MLflow logs it (grad_scaler), compared with the file's true
        return text == "True"
    try:
        return float(text) if "." in text or "e" in text else int(text)
    except (TypeError, ValueError):
        return text
