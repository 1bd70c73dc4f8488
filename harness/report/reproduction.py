"""`make report`: every sweep's tables read back from the tracking store, beside the published
figures, with the verdicts of their checks, in one file: reports/REPRODUCTION.md (+ one PNG a table).

A sweep not run yet is listed as "not run" with the command that runs it; cells measured on
different machines or software are reported as separate tables."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.fingerprint import fingerprint
from harness.report import checks, overview, tables as report
from harness.store import Store
from harness.sweeps import spec as sweepspec


def write_reproduction(store: Store, out_dir: Path = report.REPORTS_DIR) -> tuple[Path, str]:
    """Write REPRODUCTION.md and the plots; return its path and its summary line."""
    sections, verdicts, ran, not_run = [], [], [], []
    for name in sweepspec.available():
        spec = sweepspec.load(name)
        try:
            reports = report.build_all(store, spec)
        except UserError as err:
            not_run.append(name)
            sections.append(f"## {spec.title}\n\n**Not run** ({err}) Run it with "
                            f"`make sweep-{name} SCALE=smoke` (or `SCALE=quick`, or the document's scale "
                            f"with `make sweep-{name}`).\n")
            continue
        ran.append(name)
        written = overview.publish(store, spec, store.find_experiment(spec.name), reports, out_dir)
        for built, paths in zip(reports, written):
            verdicts += built.verdicts
            sections.append("#" + built.markdown + f"\n![{spec.title}]({paths[2].name})\n")
    summary = (f"{len(ran)} of {len(ran) + len(not_run)} tables run"
               + (f" (not run: {', '.join(not_run)})" if not_run else "")
               + "; checks: " + checks.count_line(verdicts))
    this = fingerprint()
    head = ["# Reproduction report", "",
            f"Our figures beside the published ones, read back from the tracking store {store.uri}.",
            f"Written on {this['host']} ({this['cpu.model']}, {this['cpu.cores']} cores, GPUs: "
            f"{this['gpu.names']}, torch {this['torch.version']}); each table states the machine its "
            "cells ran on. Checks judge exact facts, trends, ratios, comparisons between rows, the best row "
            "and the absence of an effect; absolute seconds from different hardware are shown but never "
            "judged. A check measured without what the document's machine had and the claim depends on (cores, "
            "GPUs, native bf16, a backend) is a **stand-in**, labelled so; its failure is **DIFFERS: machine** "
            "only when it misses on the side the missing resource predicts, with the reason. Timing checks are "
            "**INCONCLUSIVE** unless the whole 95% interval over the repeats passes or fails.", "",
            f"**Summary:** {summary}", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "REPRODUCTION.md"
    path.write_text("\n".join(head) + "\n" + "\n\n".join(sections))
    return path, summary
