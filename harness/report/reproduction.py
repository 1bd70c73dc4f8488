"""`make report`: every sweep's tables read back from the tracking store, beside the published
figures, with the verdicts of their checks, in one document: reports/REPRODUCTION.md (+ one PNG,
one CSV a table).

Its order is a reader's: one line per table first (the claim, ours against the published figure,
the verdict and its caveat), then the caveats that matter, the machine (CPU flags, the load probe,
every peak an MFU was divided by, so each MFU can be recomputed), the conventions every table
shares (stated once), and then the tables in the documents' order. A sweep not run yet is listed
as "not run" with the command that runs it; cells measured on different machines or software are
reported as separate tables."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from harness.errors import UserError
from harness.machine.fingerprint import cpu_flags, fingerprint
from harness.folders import REPORTS_DIR
from harness.machine.machine_load import CONTENDED_CORES
from harness.report import checks, overview, tables as report
from harness.report.order import in_document_order
from harness.store import Store, redact
from harness.store.tracking import NOTE_PREFIX
from harness.store.uris import hide_password
from harness.specs import sweep_spec

# The CPU flags that decide what a CPU computes natively (harness/training/precision.py) and how fast.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
               "amx_int8", "amx_fp16")
CHANCE = 0.12   # best test accuracy at or below this, on the 10-class data sets used here: chance (10%)
CLAIM_LIMIT = 150


def write_reproduction(store: Store, out_dir: Path = REPORTS_DIR) -> tuple[Path, str]:
    """Write REPRODUCTION.md and the plots; return its path and its summary line."""
    specs = {name: sweep_spec.load(name) for name in sweep_spec.available()}
    built, not_run = {}, {}
    path = out_dir / "REPRODUCTION.md"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in in_document_order({n: s.title for n, s in specs.items()}):
        try:
            reports = report.build_all(store, specs[name])
        except UserError as err:
            not_run[name] = hide_password(str(err), store.uri)   # the message names the store
            continue
        written = overview.publish(store, specs[name], store.find_experiment(name), reports, out_dir)
        built[name] = list(zip(reports, written))
    if not built and path.exists():  # a mistyped store, say: the report it would replace is kept
        raise UserError(f"no sweep has a finished cell in the tracking store {redact(store.uri)}, so {path} is "
                        "left as it was; check --tracking-uri (or run a sweep first).")
    verdicts = [v for pairs in built.values() for r, _ in pairs for v in r.verdicts]
    summary = (f"{len(built)} of {len(built) + len(not_run)} tables run"
               + (f" (not run: {', '.join(not_run)})" if not_run else "")
               + "; checks: " + checks.count_line(verdicts))
    first = [pairs[0][0] for pairs in built.values()]
    lines = ["# Reproduction report", "",
             f"Our figures beside the published ones, read back from the tracking store {redact(store.uri)}. "
             f"**{summary}.**", "",
             "## At a glance", "", *glance(first, not_run, specs), "",
             "## Caveats", "", *caveats(first, not_run, specs), "",
             "## Machine", "", *machine(first), "",
             "## Conventions", "", *conventions(first), "",
             "## Tables", ""]
    for name, pairs in built.items():
        for built_report, paths in pairs:
            section = report.to_markdown(built_report, built_report.runs[0], conventions=False)
            lines += ["##" + section, f"![{specs[name].title}]({paths[2].name})", ""]
    if not_run:
        lines += ["### Not run", "", "**Not run** here, each with the command that runs it (`SCALE=smoke`, `quick`, "
                  "`cpu`, or the document's scale without SCALE):", ""]
        lines += [f"- {specs[name].title}: `make sweep-{name} SCALE=smoke` ({reason})" for name, reason in not_run.items()]
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path, summary


_LABEL = re.compile(r"^(Table \d+(?:\.\d+)?|[TD]\d[\w./]*)( exercise(?: \d+)?)?")


def label(spec) -> str:
    """The table's name as the document gives it, and the sweep's: "T9.2/T9.3 `cpu-ddp`"."""
    found = _LABEL.match(spec.title)
    return (f"{''.join(g for g in found.groups() if g)} " if found else "") + f"`{spec.name}`"


def glance(reports: list, not_run: dict[str, str], specs: dict) -> list[str]:
    lines = ["| table | claim | ours vs published | verdict | caveat |", "|---|---|---|---|---|"]
    for r in reports:
        judged = [v for v in r.verdicts if v.verdict != checks.NA] or r.verdicts
        claim, detail = (judged[0].check, judged[0].detail) if judged else (r.spec.title, "no check")
        verdict = checks.count_line(r.verdicts) if r.verdicts else "not judged"
        lines.append(f"| {label(r.spec)} | {_short(claim)} | {_short(detail)} | {verdict} | "
                     f"{'; '.join(table_caveats(r)) or '—'} |")
    for name in not_run:
        lines.append(f"| {label(specs[name])} | {_short(specs[name].title)} | — | not run | — |")
    return lines


def table_caveats(r) -> list[str]:
    """What a reader must know before trusting the table's line, shortest first."""
    found = [n["text"] for n in r.spec.report.get("notes", []) if "stand" in n["text"]
             and any(n["text"] in str(v) for v in r.table.get("note", []))]
    if "test_accuracy" in r.table and r.table["test_accuracy"].notna().any() \
            and r.table["test_accuracy"].max() <= CHANCE:
        found.append(f"accuracy at chance ({100 * r.table['test_accuracy'].max():.1f}% at best)")
    skipped = sum(": skipped: " in p for p in r.problems)
    if skipped:
        found.append(f"{skipped} cell(s) skipped here")
    contended = sum(run.metrics.get("contended") == 1 for run in r.runs)
    if contended:
        found.append(f"{contended} cell(s) timed under contention")
    invalid = sum(run.metrics.get("mfu_invalid") == 1 for run in r.runs)
    if invalid:
        found.append(f"MFU: peak below achieved in {invalid} cell(s)")
    return found


def caveats(reports: list, not_run: dict[str, str], specs: dict) -> list[str]:
    lines = []
    smoke = [label(r.spec) for r in reports if r.scale == "smoke"]
    if smoke:  # a newcomer's first report: its N/A are the scale's, not failures to reproduce
        lines.append(f"- **Smoke** ({', '.join(smoke)}): {checks.SMOKE_REASON}; at scale smoke only the exact "
                     "checks are judged, the claims about the documents' figures are N/A.")
    stand_ins: dict[str, list[str]] = {}
    for r in reports:
        for note in r.spec.report.get("notes", []):
            if "stand" in note["text"] and any(note["text"] in str(v) for v in r.table.get("note", [])):
                stand_ins.setdefault(note["text"], []).append(label(r.spec))
    for text, where in stand_ins.items():
        lines.append(f"- **Stand-in** ({', '.join(where)}): {text}.")
    chance = [label(r.spec) for r in reports if "at chance" in " ".join(table_caveats(r))]
    if chance:
        lines.append(f"- **Chance accuracy** ({', '.join(chance)}): the best test accuracy is at or below "
                     f"{100 * CHANCE:.0f}% on 10 classes, so these runs learned little at this scale; their times "
                     "still compare, their accuracies do not.")
    for r in reports:
        skipped = [p for p in r.problems if ": skipped: " in p]
        if skipped:
            reasons = Counter(p.split(": skipped: ", 1)[1].split(";")[0] for p in skipped)
            lines.append(f"- **Cannot run here** ({label(r.spec)}): "
                         + "; ".join(f"{n} cell(s): {why}" for why, n in reasons.items()) + ".")
    if not_run:
        lines.append(f"- **Not run** ({len(not_run)} table(s)): {', '.join(label(specs[n]) for n in not_run)}; the end "
                     "of the Tables section says why and how to run each.")
    mfu = [f"{label(r.spec)}: {c}" for r in reports for c in table_caveats(r) if c.startswith("MFU")]
    if mfu:
        lines.append(f"- **MFU** ({'; '.join(mfu)}): an MFU above 1 means the peak was measured too low; "
                     "no figure is shown and the peak is measured again at the next command.")
    return lines or ["- none"]


def machine(reports: list) -> list[str]:
    this = fingerprint()
    flags = cpu_flags()
    have = [f for f in SPEED_FLAGS if f in flags]
    lines = [f"- Written on {this['host']}: {this['cpu.model']}, {this['cpu.cores']} cores, GPUs: {this['gpu.names']}, "
             f"torch {this['torch.version']} (fingerprint {this['fingerprint']}); each table names the machine its "
             "cells ran on.",
             f"- CPU flags that decide native dtypes and speed: {', '.join(have) or 'none of ' + ', '.join(SPEED_FLAGS)}"
             + (f"; missing: {', '.join(f for f in SPEED_FLAGS if f not in flags)}" if len(have) < len(SPEED_FLAGS) else "")
             + ".",
             f"- Calibration: around every cell the load probe (harness/machine/machine_load.py) counts the cores other work "
             f"kept busy; {CONTENDED_CORES} or more marks the cell contended and its row says so. "
             f"{sum(run.metrics.get('contended') == 1 for r in reports for run in r.runs)} of "
             f"{sum(len(r.runs) for r in reports)} cells were.",
             "- Peaks (each MFU's denominator: a cell's `peak_tflops` is `peak_devices` times the figure under its "
             "`peak_key`; measured here, `harness peak`):", ""]
    lines += peaks_used(reports)
    return lines


def peaks_used(reports: list) -> list[str]:
    """Every peak a table's MFU was divided by, as its cells logged it, with the tables that used it."""
    used: dict[tuple[str, str], list[str]] = {}
    for r in reports:
        for run in r.runs:
            key, how = run.tags.get(f"{NOTE_PREFIX}peak_key"), run.tags.get(f"{NOTE_PREFIX}peak_measured")
            if key and how:
                where = used.setdefault((key, how), [])
                if label(r.spec) not in where:
                    where.append(label(r.spec))
    if not used:
        return ["  (no cell logged its peak)"]
    return [f"  - `{key}`: {how} (used by {', '.join(where)})" for (key, how), where in sorted(used.items())]


def conventions(reports: list) -> list[str]:
    clocks: dict[str, list[str]] = {}
    for r in reports:
        clock = r.runs[0].tags.get("harness.clock", "not stated")
        clocks.setdefault(clock, []).append(label(r.spec))
    lines = ["- **Clock**: what is inside each table's timed interval:"]
    lines += [f"  - {', '.join(where)}: {clock}." for clock, where in clocks.items()]
    lines += [
        "- **Speed-up**: our baseline row's median time divided by the row's (the book's likewise, from its "
        "figures), over the rounds both rows ran: a round one of them lacks (added by `--until-decided`, "
        "or a failed cell) has no partner timed on the same machine; absolute seconds from different "
        "hardware are shown but never judged.",
        "- **MFU**: training FLOPs per second (counted per step, harness/training/flops.py: matmuls and convolutions, "
        "forward and backward, groups honoured) over the peak of the cores or devices the run used, in its "
        "dtype (the Machine section). The CSV beside each table holds `flops_per_sample`, `mfu_samples`, "
        "`mfu_time_s`, `peak_devices`, `peak_tflops` and `peak_key`, so MFU = flops_per_sample x mfu_samples / "
        "mfu_time_s / peak_tflops can be recomputed. **peak below achieved**: an MFU above 1, an error of the "
        "peak, never a result; **N/A**: a dtype without native arithmetic on the device, which has no peak.",
        "- **Intervals**: a figure in brackets `[lo, hi]` is its interval over the cell's repeats; a time "
        "with `(IQR x)` shows the interquartile range of its repeats; a figure alone had one repeat.",
        "- **Verdicts**: checks judge exact facts, trends, ratios, comparisons between rows, the best row and the "
        "absence of an effect. A check measured without what the document's machine had and the claim depends on "
        "(cores, GPUs, native bf16, a backend) is a **stand-in**, labelled so whether it passes or fails; its "
        "failure is **DIFFERS: machine** only when it misses on the side the missing resource predicts, with the "
        "reason. Timing checks are **INCONCLUSIVE** unless the whole 95% interval over the repeats passes or "
        "fails. N/A: the check had no rows to judge here (or judged accuracies at chance).",
        "- **Tables** show a few columns; each table's CSV keeps every metric.",
    ]
    return lines


def _short(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= CLAIM_LIMIT else text[:CLAIM_LIMIT - 1] + "…"
