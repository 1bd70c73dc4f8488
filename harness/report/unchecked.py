"""The documents' claims a page leaves unchecked, each with why and what would check it: the tables
whose every document claim is N/A here, and the tables not run (a GPU-only sweep says so). A reader
sees what the page does not show as plainly as what it does.

Why comes from the verdicts themselves (their N/A detail); what would check it from the sweep file's
`[published] check_with`, a sentence written beside the claims (never a figure), else the command
that runs the sweep."""

from __future__ import annotations

from harness.report import evidence
from harness.report.checks import Judgement


def section(reports: list, not_run: dict[str, str], specs: dict, label) -> list[str]:
    """The page's "Left unchecked" lines; none when every table judged some document claim."""
    lines = []
    for r in reports:
        claims = [v for v in r.verdicts if evidence.of(v) in evidence.CLAIMS]
        if not claims or any(v.verdict != Judgement.NA for v in claims):
            continue
        lines.append(f"- {label(r.spec)}: its {len(claims)} document claim(s) are all N/A at scale {r.scale}: "
                     + "; ".join(f"\"{v.check}\": {v.detail}" for v in claims)
                     + f". What would check them: {_check_with(r.spec)}.")
    for name in not_run:
        spec = specs[name]
        claims = [c.name for c in spec.checks if c.claim == "published"]
        gpu_only = spec.base.get("device") == "cuda" and "cpu" not in spec.scales
        why = ("needs a CUDA GPU (its device is cuda and it has no cpu scale), so no CPU page runs it"
               if gpu_only else "not run in this store")
        lines.append(f"- {label(spec)}: {why}; its claims: " + "; ".join(f"\"{c}\"" for c in claims)
                     + f". What would check them: {_check_with(spec, gpu_only)}.")
    return ["## Left unchecked", "", *lines, ""] if lines else []


def _check_with(spec, gpu_only: bool = False) -> str:
    said = spec.published.get("check_with")
    if said:
        return said
    if gpu_only:
        return (f"`make gpu-check` on a GPU machine (the GPU tests and every GPU sweep at smoke scale), then "
                f"`make sweep-{spec.name}` at the document's scale")
    return f"`make sweep-{spec.name}` at the document's scale"
