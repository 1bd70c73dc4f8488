"""`make report`: every sweep's tables read back from the tracking store, beside the published
figures, with the verdicts of their checks, in one document: reports/REPRODUCTION.md (+ one PNG,
one CSV a table).

Its order is a reader's: the machine the cells ran on (line 3), one line per table (the claim, ours
against the published figure, its verdict, the table's counts and its caveat), then the caveats that
matter, the machine (CPU flags hash, the load probe, every peak an MFU was divided by, so each MFU
can be recomputed), the noise (free A/A pairs beside the noise floor), the conventions every table
shares (stated once), and then the tables in the documents' order. A sweep not run yet is listed
as "not run" with the command that runs it; cells measured on different machines or software are
reported as separate tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness.errors import UserError
from harness.folders import REPORTS_DIR
from harness.machine.fingerprint import machine_text
from harness.machine.machine_load import CONTENDED_CORES
from harness.report import aa_pairs, checks, evidence, jpeg_cost, overview, render, reruns, unchecked, verdict_file
from harness.report import tables as report
from harness.report.order import document_label, in_document_order
from harness.store import Store, redact
from harness.store.tracking import NOTE_PREFIX
from harness.store.uris import hide_password
from harness.specs import sweep_spec

CHANCE = 0.12   # best test accuracy at or below this, on the 10-class data sets used here: chance (10%)


def write_reproduction(store: Store, out_dir: Path = REPORTS_DIR, sweeps: list[str] | None = None,
                       measured_again: Path | None = None) -> tuple[Path, str]:
    """Write REPRODUCTION.md, verdicts.csv and the plots, over every sweep or over `sweeps` alone (a
    results folder that holds some of the tables, measured on a host of its own); return its path and
    summary line. The sub-folders of `measured_again` (default: `out_dir`) that hold some of these
    tables measured anew are named under each such table and in the glance."""
    specs = {name: sweep_spec.load(name) for name in (sweeps or sweep_spec.available())}
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
    again = reruns.find(out_dir if measured_again is None else measured_again)
    verdicts = [v for pairs in built.values() for r, _ in pairs for v in r.verdicts]
    summary = (f"{len(built)} of {len(built) + len(not_run)} tables run"
               + (f" (not run: {', '.join(not_run)})" if not_run else "")
               + "; checks: " + evidence.count_line(verdicts))
    first = [pairs[0][0] for pairs in built.values()]
    verdict_file.write([line for pairs in built.values() for r, _ in pairs for line in verdict_file.rows(r, label(r.spec))],
                       out_dir / verdict_file.NAME)
    lines = ["# Reproduction report", "", measured_line(first), "",
             f"Our figures beside the published ones, read back from the tracking store {redact(store.uri)}. "
             f"**{summary}.**", "", *_classes_line(), "", *_measured_again_line(first, again),
             "## At a glance", "", *glance(first, not_run, specs, again), "",
             "## Caveats", "", *caveats(first, not_run, specs), "",
             *unchecked.section(first, not_run, specs, label),
             "## Machine", "", *machine(first), "",
             "## Noise", "", *noise(first), "",
             "## Conventions", "", *conventions(first), "",
             "## Tables", ""]
    for name, pairs in built.items():
        for built_report, files in pairs:
            section = render.to_markdown(built_report, built_report.runs[0], conventions=False)
            lines += ["##" + section, *_under_table(built_report, again.get(name, [])),
                      f"![{specs[name].title}]({files.plot.name})", ""]
    if not_run:
        lines += ["### Not run", "", "**Not run** here, each with the command that runs it (`SCALE=smoke`, `quick`, "
                  "`cpu`, or the document's scale without SCALE):", ""]
        lines += [f"- {specs[name].title}: `make sweep-{name} SCALE=smoke` ({reason})" for name, reason in not_run.items()]
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path, summary


def _classes_line() -> list[str]:
    """What the classes the counts above are in mean, in one paragraph (harness/report/evidence.py)."""
    return ["The checks are counted by class: a **book timing** is a document's timing claim measured on what it "
            "needs; a **measured claim** any other document's claim so measured; a **stand-in** a document's claim "
            "measured without something it needs (fewer cores, CPU processes for GPUs, JPEG images or grey CIFAR-10 "
            "for the document's data, bf16 for fp16); **consistency** a check of the measurement itself; an "
            "**exact fact** is known before measuring (a format's bits, a count by construction); a **computed "
            "fact** is computed by our code the same way on every run (a FLOP count, outputs equal by "
            "construction); a **project goal** is this project's own. Only the first two reproduce a document; "
            "the last three cannot fail by the machine's noise."]


def _measured_again_line(reports: list, again: dict) -> list[str]:
    """Which tables a sub-folder measured again, so a reader knows this page is not their last word."""
    named = [f"{label(r.spec)} in " + " and ".join(f"[{x.folder}/]({x.page})" for x in again[r.spec.name])
             for r in reports if again.get(r.spec.name)]
    if not named:
        return []
    return [f"**Measured again**, with seeds on hosts of their own: {'; '.join(named)}. Each such table says so "
            "below it, and its line in the glance shows the newest decided verdict of its headline claim.", ""]


def _under_table(r, again: list) -> list[str]:
    """The lines under a table: the newer measurements that supersede it, and what its stand-in data
    costs (the JPEG ladder's measured figure), each with where to read more."""
    lines = []
    for x in again:
        head, mine = x.headline(), evidence.headline(r.verdicts)
        first = x.lines[0]
        seeds = f"{first['seeds']} seeds, " if first["seeds"] and first["seeds"] != "1" else ""
        said = (f"its headline claim \"{head['check']}\" is **{head['label']}** there"
                + (f" (here **{mine.label}**)" if mine is not None and mine.check == head["check"] else "")
                if head is not None else "it judged no check")
        scale = "" if first["scale"] == r.scale else f" at scale {first['scale']}"
        lines += [f"**Measured again**: [{x.folder}/]({x.page}) supersedes this table, measured{scale} with {seeds}"
                  f"measurement procedure {first['procedure']}, on {first['machine']} (fingerprint "
                  f"{first['fingerprint']}), {_days(first)}: {said}; all its checks there: {x.counts()}.", ""]
    cost = jpeg_cost.cost_sentence() if _jpeg_stand_in(r) else ""
    if cost:
        lines += [f"**JPEG stand-in**: every accuracy above is the JPEG CIFAR-10's; {cost}.", ""]
    return lines


def _days(line: dict) -> str:
    """The days a table's cells started on, from its verdicts.csv line."""
    first, last = line["first_cell"][:10], line["last_cell"][:10]
    return first if first == last else f"{first} to {last}"


def label(spec) -> str:
    """The table's name as the document gives it, and the sweep's: "T9.2/T9.3 `cpu-ddp`"."""
    shown = document_label(spec.title)
    return (f"{shown} " if shown else "") + f"`{spec.name}`"


def measured_line(reports: list) -> str:
    """Line 3 of the page: the machine(s) the cells ran on and when, from what the cells logged
    (never the machine that writes the page, so the page is the same wherever it is written)."""
    machines: dict[str, list] = {}
    for r in reports:
        machines.setdefault(r.fingerprint, []).append(r)
    parts = []
    for key, found in machines.items():
        runs = [run for r in found for run in r.runs]
        days = sorted({_day(run.start_time) for run in runs if run.start_time})
        when = (days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}") if days else "date unknown"
        parts.append(f"{found[0].machine}, host {runs[0].tags.get('host', 'unknown')} (fingerprint {key}), {when}"
                     + ("" if len(machines) == 1 else f": {', '.join(label(r.spec) for r in found)}"))
    return "**Measured on** " + "; ".join(parts) + "." if parts else "**Measured on** no machine yet (no table run)."


def _day(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")


def glance(reports: list, not_run: dict[str, str], specs: dict, again: dict | None = None) -> list[str]:
    """One line a table: its headline claim (a document's claim whenever one was judged, even
    undecided), the newest decided verdict of that claim (this page's, or a sub-folder's that
    measured the table again), its class, and the count of all the table's checks; nothing cut."""
    lines = ["| table | headline claim | ours vs published | verdict | class | all its checks here | caveat |",
             "|---|---|---|---|---|---|---|"]
    for r in reports:
        shown = evidence.headline(r.verdicts)
        claim = shown.check if shown else r.spec.title
        if shown is None:
            verdict, detail, klass = "not judged", "no check", "—"
        else:
            newest = reruns.newest(shown.label, str(shown.verdict), shown.detail, evidence.of(shown),
                                   verdict_file.rows(r, "")[0]["last_cell"], shown.check, (again or {}).get(r.spec.name, []))
            verdict, detail, klass = _verdict_cell(shown, newest), newest.detail, newest.klass
        lines.append(f"| {label(r.spec)} | {_cell(claim)} | {_cell(detail)} | {verdict} | {klass} | "
                     f"{evidence.count_line(r.verdicts) if r.verdicts else '—'} | {'; '.join(table_caveats(r)) or '—'} |")
    for name in not_run:
        lines.append(f"| {label(specs[name])} | {_cell(specs[name].title)} | — | not run | — | — | — |")
    return lines


def _verdict_cell(here, newest: reruns.Shown) -> str:
    """The glance's verdict: the newest decided one, and where it was measured when not on this page."""
    if newest.where is None:
        return f"**{here.label}**"
    first = newest.where.lines[0]
    seeds = f", {first['seeds']} seeds" if first["seeds"] and first["seeds"] != "1" else ""
    return (f"**{newest.label}** measured again in [{newest.where.folder}/]({newest.where.page}) "
            f"({first['last_cell'][:10]}, scale {first['scale']}{seeds}); here {here.label}")


def table_caveats(r) -> list[str]:
    """What a reader must know before trusting the table's line, shortest first."""
    found = [n["text"] for n in stand_in_notes(r)]
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
    loaded = sum(render.MFU in run.metrics and render.peak_under_load(run.tags.get(f"{NOTE_PREFIX}peak_measured"))
                 for run in r.runs)
    if loaded:
        found.append(f"MFU: peak measured under load in {loaded} cell(s)")
    dirty = verdict_file.dirty_cells(r.runs)
    if dirty:
        found.append(f"{dirty} of {len(r.runs)} cells ran from uncommitted code")
    return found


def stand_in_notes(r) -> list[dict]:
    """The sweep file's notes marked `stand_in` (a stand-in data set, machine or dtype) that hold for
    some row of the table."""
    return [n for n in r.spec.report.get("notes", []) if n.get("stand_in")
            and any(n["text"] in str(v) for v in r.table.get("note", []))]


def _jpeg_stand_in(r) -> bool:
    """Whether the table trained on the JPEG CIFAR-10 (a note says so, naming the ladder's cost)."""
    return any(n.get("cost") == "jpeg-ladder" for n in stand_in_notes(r))


def caveats(reports: list, not_run: dict[str, str], specs: dict) -> list[str]:
    lines = []
    smoke = [label(r.spec) for r in reports if r.scale == "smoke"]
    if smoke:  # a newcomer's first report: its N/A are the scale's, not failures to reproduce
        lines.append(f"- **Smoke** ({', '.join(smoke)}): {checks.SMOKE_REASON}; at scale smoke only the exact "
                     "checks are judged, the claims about the documents' figures are N/A.")
    stand_ins: dict[str, list[str]] = {}
    costs: dict[str, str] = {}
    for r in reports:
        for note in stand_in_notes(r):
            stand_ins.setdefault(note["text"], []).append(label(r.spec))
            if note.get("cost") == "jpeg-ladder":
                costs[note["text"]] = jpeg_cost.cost_sentence()
    for text, where in stand_ins.items():
        lines.append(f"- **Stand-in** ({', '.join(where)}): {text}" + (f"; {costs[text]}" if costs.get(text) else "") + ".")
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
    dirty = [f"{label(r.spec)}: {verdict_file.dirty_cells(r.runs)} of {len(r.runs)}" for r in reports
             if verdict_file.dirty_cells(r.runs)]
    if dirty:
        lines.append(f"- **Uncommitted code** ({'; '.join(dirty)} cells): these cells ran from a working tree with "
                     "changes not committed (their `git.dirty` tag), so their code is not exactly that of the commit "
                     "they name (`git.commit`); `harness reproduce` and `harness study` now refuse to start from "
                     "such a tree unless given --allow-dirty.")
    if not_run:
        lines.append(f"- **Not run** ({len(not_run)} table(s)): {', '.join(label(specs[n]) for n in not_run)}; the end "
                     "of the Tables section says why and how to run each.")
    mfu = [f"{label(r.spec)}: {c}" for r in reports for c in table_caveats(r) if c.startswith("MFU")]
    if mfu:
        why = []
        if any("peak below achieved" in c for c in mfu):
            why.append("an MFU above 1 means the peak was measured too low; no figure is shown and the peak is "
                       "measured again at the next command")
        if any("under load" in c for c in mfu):
            why.append(f"a peak measured while other work held {CONTENDED_CORES:g} core or more (the Machine "
                       "section) is likely low, so an MFU divided by it is an upper bound, shown as \"at most\"; "
                       "the peak is measured again when the machine is quiet, and a cell's MFU changes only "
                       "when the cell is measured again")
        lines.append(f"- **MFU** ({'; '.join(mfu)}): {'; '.join(why)}.")
    return lines or ["- none"]


def machine(reports: list) -> list[str]:
    """What the cells ran on, from the tags they logged (the page reads the same wherever it is
    written): each machine's CPU flags hash and BF16 flag, the load probe, every peak."""
    seen: dict[str, dict] = {}
    for r in reports:
        if r.runs:
            seen.setdefault(r.fingerprint, r.runs[0].tags)
    lines = [f"- {tags.get('host', 'unknown')} (fingerprint {key}): {machine_text(tags)}; CPU flags hash "
             f"{tags.get('cpu.flags_hash', 'unknown')}, AVX512-BF16/AMX-BF16 flag {tags.get('cpu.native_bf16', 'unknown')}. "
             "A dtype counts as native for a speed claim when its measured peak is at least fp32's (the peaks below), "
             "not by a flag." for key, tags in seen.items()]
    lines += [
             f"- Calibration: around every cell the load probe (harness/machine/machine_load.py) counts the cores other work "
             f"kept busy; {CONTENDED_CORES} or more marks the cell contended: its table says so, its times and "
             "speed-ups are shown marked \"contended, not judged\", and no check rests on them "
             "(harness/report/contention.py). "
             f"{sum(run.metrics.get('contended') == 1 for r in reports for run in r.runs)} of "
             f"{sum(len(r.runs) for r in reports)} cells were.",
             _code_line(reports),
             "- Peaks (each MFU's denominator: a cell's `peak_tflops` is `peak_devices` times the figure under its "
             "`peak_key`; measured here, `harness peak`):", ""]
    lines += peaks_used(reports)
    return lines


def _code_line(reports: list) -> str:
    """Which code the cells ran: the commits they logged, and how many ran with uncommitted changes."""
    runs = [run for r in reports for run in r.runs]
    commits = Counter(run.tags.get("git.commit", "unknown")[:7] for run in runs)
    dirty = verdict_file.dirty_cells(runs)
    return (f"- Code: the {len(runs)} cells ran at {len(commits)} commit(s) of this repository (`git.commit`: "
            + ", ".join(f"{c} {n} cells" for c, n in sorted(commits.items())) + "); "
            + (f"{dirty} of them from a working tree with uncommitted changes (`git.dirty`), so their code is no "
               "commit's exactly." if dirty else "none from a working tree with uncommitted changes (`git.dirty`)."))


def noise(reports: list) -> list[str]:
    """The free A/A pairs (harness/report/aa_pairs.py) beside the noise floor measured on purpose."""
    return ["- The noise floor: `make bench-noise` runs one cell as two identical arms in fresh processes; "
            "its figures on this project's hosts (the spread of the per-round ratio, the smallest speed-up n "
            "rounds can show) are in docs/MEASUREMENT.md#repeats.",
            "- Free A/A pairs: the same configuration measured by more than one table, on the same machine, "
            "at different times; how far apart they are is the noise between two rows that differ in nothing:",
            *("  " + line for line in aa_pairs.lines(reports, label, render.format_value))]


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
        "- **Intervals**: a figure in brackets `[lo, hi]` is its 95% interval over the cell's repeats: over the "
        "rounds for a time or a speed-up, over the seeds for an accuracy (round r of a sweep trains seed base + r, "
        "the same for every row); a time with `(IQR x)` shows the interquartile range of its repeats; a figure "
        "alone had one repeat, or, for an accuracy, one seed (the table says so). An interval stops at what the "
        "figure can physically be: an accuracy's at 0 and 100%, a speed-up's at the row's workers over the "
        "baseline's (two devices cannot be more than twice as fast as one; an efficiency's at 100%).",
        "- **Verdicts**: checks judge exact facts, trends, ratios, comparisons between rows, the best row and the "
        "absence of an effect. A check measured without what the document's machine had and the claim depends on "
        "(cores, GPUs, native bf16, a backend) is a **stand-in**, labelled so whether it passes or fails; its "
        "failure is **DIFFERS: machine** only when it misses on the side the missing resource predicts, with the "
        "reason; a stand-in data set or dtype (JPEG CIFAR-10, bf16 for fp16) is labelled a stand-in too, and a "
        "check on settings its claim does not assume (another model) is N/A. Timing checks, and accuracy checks "
        "over seeds, are **INCONCLUSIVE** unless the whole 95% interval passes or fails. Every verdict is counted "
        "in its class (book timing, measured claim, stand-in, consistency, exact fact, computed fact, project "
        "goal; harness/report/evidence.py), and a table's glance line shows its headline claim: its first "
        "document's claim judged here, decided or not, never a fact shown above it. N/A: the check had no rows to "
        "judge here (or judged accuracies at chance).",
        "- **Tables** show a few columns; each table's CSV keeps every metric.",
    ]
    return lines


def _cell(text: str) -> str:
    """Text as one Markdown table cell: one line, no column bar; never cut."""
    return " ".join(str(text).split()).replace("|", "/")
