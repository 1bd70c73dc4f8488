"""A sweep's table as a reader sees it: a few readable columns (the CSV keeps every one), intervals
beside the figures they bound, the MFU or why there is none, each row's note below the table, the
cells without a result grouped by reason, and a Scale line naming only what the grid keeps fixed.

The table itself (harness/report/tables.py) is data; this module only writes it as Markdown: the
table's page (to_markdown) and each figure (format_value)."""

from __future__ import annotations

import math
import re

import pandas as pd

from harness.machine.machine_load import CONTENDED_CORES
from harness.report import checks, contention
from harness.store import RunRecord

MFU = "mfu"   # model FLOPs utilisation against the measured peak (harness/training/flops.py)

MAX_COLUMNS = 8   # a table of more is unreadable on a page; the CSV has the rest
INVALID_MFU = "peak below achieved"
# How a cell logs the peak it was divided by (Peak.provenance, harness/training/peak.py) ends with the
# cores other work kept busy while the peak was measured: "..., other work 1.0 cores".
PEAK_OTHER_WORK = re.compile(r"other work (\d+(?:\.\d+)?) cores")


def peak_under_load(provenance: object) -> bool:
    """Whether a peak was measured while other work held half a core or more (CONTENDED_CORES, the
    mark of a contended cell too). Such a kernel ran slow, so the peak is low and an MFU divided by it is an
    upper bound: the page prints it as "at most". `provenance` is the cell's (or a row's joined)
    peak_measured text; a row with any such cell counts, its median MFU bounded the same way."""
    return isinstance(provenance, str) and any(
        float(cores) >= CONTENDED_CORES for cores in PEAK_OTHER_WORK.findall(provenance))

LABELS = {"train_time_s": "time (s)", "train_time_iqr_s": "IQR (s)", "speedup": "speed-up", "mfu": "MFU",
          "test_accuracy": "accuracy", "efficiency": "efficiency", "repeats": "repeats"}


def label(column: str) -> str:
    if column.startswith("book_"):
        return "book " + label(column.removeprefix("book_"))
    return LABELS.get(column, column.replace("_", " "))


def shown_columns(report) -> list[str]:
    """The axes, then ours and the book's figure side by side in order of importance, at most
    MAX_COLUMNS in all (never fewer than the axes and six figures)."""
    t, spec = report.table, report.spec
    axes = [a for a in spec.axes() if a in t]
    time = spec.report.get("time", "train_time_s")
    wanted = [time]
    wanted += ["speedup", "book_speedup", "efficiency"] if "speedup" in t else [f"book_{time}"]
    wanted.append("mfu")
    for metric in spec.report.get("metrics", ["train_time_s", "test_accuracy"]):
        if metric != time:
            wanted += [metric, f"book_{metric}"]
    wanted += ["efficiency", "book_efficiency"]
    present = [c for c in dict.fromkeys(wanted) if c in t and c not in axes and _has_values(t, c)]
    room = max(MAX_COLUMNS - len(axes), 6)
    return axes + present[:room]


def _has_values(t: pd.DataFrame, column: str) -> bool:
    if column == "mfu":   # a table with no MFU figure still says why (peak below achieved, N/A)
        return any(c in t and t[c].notna().any() for c in ("mfu", "mfu_invalid", "mfu_na"))
    return t[column].notna().any()


def format_interval(value, lo, hi, text) -> str:
    """`1.83x [1.76, 1.90]` when both bounds are known, `1.83x` otherwise (the bounds of a column X
    are columns X_lo and X_hi)."""
    shown = text(value)
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return shown
    return f"{shown} [{text(lo).rstrip('x%')}, {text(hi).rstrip('x%')}]" if shown.endswith(("x", "%")) \
        else f"{shown} [{text(lo)}, {text(hi)}]"


def value_text(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, str):
        return value
    bare = column.removeprefix("book_")
    if "accuracy" in bare and "to_accuracy" not in bare:  # time_to_accuracy_s is seconds
        return f"{100 * value:.2f}%"
    if bare.endswith("train_flops"):  # 3.6e14, not fifteen digits
        return f"{value:.3g}"
    if bare == "mfu":
        return f"{100 * value:.1f}%" if value >= 0.001 else f"{100 * value:.2g}%"
    if "param_count" in bare or bare == "repeats":
        return f"{int(value):,}"
    if "speedup" in bare:
        return f"{value:.2f}x"
    if "efficiency" in bare:
        return f"{100 * value:.0f}%"
    if isinstance(value, float) and column.startswith("book_") and abs(value) < 10:
        return f"{value:.5g}"  # a published figure as printed (1.0981, 0.0011)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def cell_text(row: dict, column: str, iqr: str | None = None) -> str:
    """One cell: the value with its interval (X_lo, X_hi) where the table has one, else a timing
    with the IQR of its repeats (`iqr`: that column); an MFU the cells did not get says why."""
    value = row.get(column)
    if column == "mfu" and (value is None or pd.isna(value)):
        if row.get("mfu_invalid") == 1:
            return INVALID_MFU
        if isinstance(row.get("mfu_na"), str) and row["mfu_na"]:
            return "N/A"
    elif column == "mfu" and peak_under_load(row.get("peak_measured")):
        return f"at most {value_text(column, value)} (peak under load)"
    if iqr and row.get(f"{column}_lo") is None and (row.get("repeats") or 0) > 1 and row.get(iqr) is not None:
        return f"{value_text(column, value)} (IQR {value_text(column, row[iqr])})"
    return format_interval(value, row.get(f"{column}_lo"), row.get(f"{column}_hi"),
                           lambda v: value_text(column, v))


def table_markdown(report) -> str:
    """The readable table, then each row's note and what its MFU column leaves out."""
    t = report.table
    columns = shown_columns(report)
    axes = [a for a in report.spec.axes() if a in t]
    rows = t.astype(object).where(t.notna(), None).to_dict("records")
    lines = ["| " + " | ".join(label(c) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    time = report.spec.report.get("time", "train_time_s")
    iqr = "train_time_iqr_s" if time == "train_time_s" else f"{time.removesuffix('_s')}_iqr_s"
    # a figure that rests on a time taken under contention is shown, marked (harness/report/contention.py)
    marked = {c: contention.rests_on_contention(t, c).tolist() for c in columns}
    lines += ["| " + " | ".join(_marked(cell_text(r, c, iqr if c == time else None), marked[c][i]) for c in columns)
              + " |" for i, r in enumerate(rows)]
    shared = _notes_of_every_row(report, rows)
    notes = [f"- every row measured here: {text}" for text in shared]
    for row in rows:
        where = " ".join(f"{a}={value_text(a, row[a])}" for a in axes)
        for key in ("note", "mfu_invalid_reason", "mfu_na"):
            text = _without(row.get(key), shared) if key == "note" else row.get(key)
            if isinstance(text, str) and text:
                notes.append(f"- {where}: {text}")
    notes += _paired_baseline(t, axes, time)
    notes += _one_seed(t, columns)
    if notes:
        lines += ["", "Notes:", *dict.fromkeys(notes)]
    return "\n".join(lines)


def _marked(text: str, contended: bool) -> str:
    """A figure resting on a time taken under contention: shown, with "(contended, not judged)"."""
    return f"{text} ({contention.NOT_JUDGED})" if contended and text != "—" else text


def _notes_of_every_row(report, rows: list[dict]) -> list[str]:
    """The sweep file's notes that hold for every row measured here (a stand-in data set, processes
    for GPUs): said once above the rows' own notes, not once a row."""
    measured = [r for r in rows if (r.get("repeats") or 0) > 0]
    if len(measured) < 2:
        return []
    texts = [n["text"] for n in report.spec.report.get("notes", [])]
    return [t for t in dict.fromkeys(texts) if all(t in (r.get("note") or "") for r in measured)]


def _without(note, texts: list[str]):
    """A row's note (its notes joined by "; ") without the ones said once for every row."""
    if not isinstance(note, str) or not texts:
        return note
    for text in texts:
        note = note.replace(text, "")
    return "; ".join(part for part in note.split("; ") if part.strip())


def _paired_baseline(t: pd.DataFrame, axes: list[str], time: str) -> list[str]:
    """Where a speed-up divides the baseline's median over fewer rounds than the baseline row shows
    (a round --until-decided added to the baseline alone), the time it divides, once per such time."""
    if "paired_baseline_time_s" not in t:
        return []
    groups: dict[tuple, list[str]] = {}
    for row in t.astype(object).where(t.notna(), None).to_dict("records"):
        if row.get("paired_baseline_time_s") is None:
            continue
        where = " ".join(f"{a}={value_text(a, row[a])}" for a in axes)
        groups.setdefault((row["paired_baseline_time_s"], row["paired_rounds"]), []).append(where)
    return [f"- speed-up of {'; '.join(rows)}: over the {int(rounds)} rounds shared with the baseline, whose median "
            f"{label(time)} over them is {value_text(time, paired)} (its row shows the median over all its rounds)"
            for (paired, rounds), rows in groups.items()]


def _one_seed(t: pd.DataFrame, columns: list[str]) -> list[str]:
    """The line that says an accuracy shown without an interval is one training's, not a median
    over seeds: the rows whose cells all trained one seed (repeats of a store from before a round
    trained its own seed), or none."""
    shown = [c for c in columns if "accuracy" in c and "to_accuracy" not in c and not c.startswith("book_")]
    if not shown or "seeds" not in t:
        return []
    one = t[(t["seeds"] == 1) & t[shown].notna().any(axis=1)]
    if one.empty:
        return []
    which = "every row" if len(one) == int(t["seeds"].notna().sum()) else f"{len(one)} row(s)"
    return [f"- {label(shown[0])}: one seed in {which} (its repeats, if any, trained the same seed): "
            "the figure is one training's, with no interval, and the accuracy checks on it are INCONCLUSIVE"]


def problems_markdown(problems: list[str]) -> list[str]:
    """Cells without a result, once each, grouped by what happened and why: `label: outcome: reason`
    lines become one line per reason naming its cells."""
    groups: dict[str, list[str]] = {}
    for problem in problems:
        parts = problem.split(": ", 2)
        if len(parts) == 3:
            groups.setdefault(f"{parts[1]}: {parts[2]}", []).append(parts[0])
        else:
            groups.setdefault(problem, [])
    return [f"- {why}" + (f" ({len(cells)} cell{'s' * (len(cells) > 1)}: {'; '.join(cells)})" if cells else "")
            for why, cells in groups.items()]


def scale_line(report, sample_run) -> str:
    """What every cell of the table shares: never a swept field (its last value would read as all)."""
    spec, params = report.spec, sample_run.params
    swept = set(spec.axes())
    if spec.report.get("settings"):  # experiments that are not a training run name what to show
        shown = [f"{name} {_setting(sample_run, name)}" for name in spec.report["settings"] if name not in swept]
    else:
        m = sample_run.metrics
        candidates = [
            ("dataset", f"dataset {params.get('dataset')}"),
            ("train_limit", f"{m.get('train_samples', 0):,.0f} train / {m.get('test_samples', 0):,.0f} test images"),
            ("epochs", f"{params.get('epochs')} timed epochs"),
            ("batch_size", f"batch {params.get('batch_size')}"),
            ("lr", f"lr {params.get('lr')}"),
            ("threads", f"{float(m.get('threads_used', params.get('threads') or 0)):.0f} threads"),
            ("device", f"device {params.get('device')}"),
        ]
        # a field the experiment does not read is not among its params: no "lr None" for airbench
        shown = [text for field, text in candidates if field not in swept
                 and not (field == "train_limit" and "test_limit" in swept)
                 and (field in ("train_limit", "threads") or field in params)]
        if "model" in params and "model" not in swept:
            shown.insert(0, f"model {params['model']}")
    varied = ", ".join(a for a in spec.axes())
    return (f"- Scale: **{report.scale}** ({', '.join(shown)})" + (f"; varied: {varied}" if varied else "") + ".")


def _setting(run, name: str) -> str:
    if name in run.params:
        return run.params[name]
    value = run.metrics.get(name)
    return "?" if value is None else f"{value:g}"


def to_markdown(report, sample_run: RunRecord, conventions: bool = True) -> str:
    """The table's page: what it is, the readable table (harness/report/render.py), its verdicts and
    the cells without a result. `conventions`: also the bullets on the clock, speed-up and MFU that
    REPRODUCTION.md states once for every table."""
    spec, t = report.spec, report.table
    title = spec.title + (f" ({report.variant})" if report.variant else "")
    lines = [f"# {title}", ""] + ([f"Source: {spec.source}", ""] if spec.source else [])
    if report.scale == "smoke" and report.verdicts:
        lines += [f"**{checks.SMOKE_REASON[:1].upper()}{checks.SMOKE_REASON[1:]}**: at scale smoke only the exact "
                  "checks are judged; the claims about the documents' figures are N/A.", ""]
    lines += [scale_line(report, sample_run),
              f"- Machine: {report.machine} (fingerprint {report.fingerprint})."]
    if conventions:
        lines.append(f"- Clock: {sample_run.tags.get('harness.clock', 'not stated')}.")
    if report.drift:
        lines.append(f"- **Machine speed differs across cells**: {report.drift}.")
    lines += _contended_line(report)
    if spec.published.get("note"):
        lines.append(f"- Published figures: {spec.published['note']}.")
    if conventions and "speedup" in t:
        lines.append("- Speed-up: our baseline's median time divided by the cell's (the book's likewise), with its "
                     "95% interval over the repeats in brackets (bootstrap, paired by round; "
                     "harness/report/intervals.py); absolute seconds from different hardware are shown, not compared.")
    if conventions and MFU in t:
        lines.append("- MFU: training FLOPs per second (counted per step, harness/training/flops.py) over the measured peak "
                     "of the cores or devices the run used, in its dtype (`harness peak`); the CSV holds what it "
                     "is computed from.")
    lines += [f"- {text}" for text in spec.report.get("comments", [])]
    lines.append("")
    lines.append(table_markdown(report))
    if report.verdicts:
        lines += ["", "| check | verdict | measured |", "|---|---|---|"]
        lines += [f"| {v.check} | **{v.label}** | {v.detail} |" for v in report.verdicts]
        lines += _until_decided_line(report)
    if report.left_out:   # finished cells that belong to another table, or to an earlier procedure
        lines += ["", "Left out of this table:", *(f"- {note}" for note in report.left_out)]
    if report.problems:
        lines += ["", "Cells without a result:", *problems_markdown(report.problems)]
    return "\n".join(lines) + "\n"


def _contended_line(report) -> list[str]:
    """One bullet when cells were timed under contention, said once for the table: which rows, how
    many cores other work held, what the marks mean, and the command that measures them again."""
    t = report.table
    if contention.CONTENDED not in t:
        return []
    axes = [a for a in report.spec.axes() if a in t]

    def where(rows) -> str:
        return "; ".join(" ".join(f"{a}={value_text(a, row[a])}" for a in axes) for _, row in rows.iterrows())

    every, some = t[t[contention.CONTENDED] == 1], t[t[contention.LEFT_OUT] > 0]
    parts = []
    if len(every):
        parts.append(("every row" if len(every) == int(t["repeats"].notna().sum()) else f"row(s) {where(every)}")
                     + f": their figures are shown marked \"{contention.NOT_JUDGED}\" (a speed-up over a contended "
                     "baseline too), and no check rests on them")
    if len(some):
        parts.append(f"{int(some[contention.LEFT_OUT].sum())} repeat(s) of {where(some)}: left out, the row's "
                     "figures are its other repeats'")
    contended = [run.metrics for run in report.runs if run.metrics.get(contention.CONTENDED) == 1]
    command = _rerun(report).sweep_command("--remeasure-contended")
    return [f"- **Timed under contention** (other work held {contention.busy_cores(contended)} cores; "
            f"harness/machine/machine_load.py): {'; '.join(parts)}. `{command}` measures them again."]


def _until_decided_line(report) -> list[str]:
    """Below the checks, when some are INCONCLUSIVE: the command that adds rounds for the grid points
    they read until they are decided (harness/cli/decide.py)."""
    undecided = sum(v.verdict == checks.Judgement.INCONCLUSIVE for v in report.verdicts)
    if not undecided:
        return []
    command = _rerun(report).sweep_command("--until-decided")
    return ["", f"{undecided} check(s) INCONCLUSIVE: `{command}` adds rounds, for the grid points they read only, "
                "until they are decided or reach --max-repeats."]


def _rerun(report):
    """The command that measured the report's cells (its sweep's name and scale alone when the
    report was made without one)."""
    from harness.rerun import Rerun

    return getattr(report, "rerun", None) or Rerun(report.spec.name, report.scale)


def format_value(column: str, value) -> str:
    """A figure as the report prints it: the terminal summary uses it too."""
    return "—" if pd.isna(value) else value_text(column, value)
