"""Tables measured again: the sub-folders of a results folder that hold some of its tables measured
anew (with seeds, on a host of their own), each with its verdicts.csv (harness/report/verdict_file.py).

The page of the folder above says so under each such table, with the newer measurement's headline
verdict and its link, and its glance shows the newest decided verdict of the table's headline claim:
a reader never takes a one-seed table for the last word when three seeds decided it elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.report import evidence, verdict_file

DECIDED = tuple(str(v) for v in evidence.DECIDED)


@dataclass(frozen=True)
class Rerun:
    folder: str            # the sub-folder, relative to the page that links it
    lines: list[dict]      # its verdicts.csv lines of the one table

    @property
    def page(self) -> str:
        return f"{self.folder}/REPRODUCTION.md"

    @property
    def last_cell(self) -> str:
        return self.lines[0]["last_cell"]

    def line_of(self, check: str) -> dict | None:
        return next((line for line in self.lines if line["check"] == check), None)

    def headline(self) -> dict | None:
        return next((line for line in self.lines if line["headline"] == "1"), None)

    def counts(self) -> str:
        return evidence.count_pairs([(line["class"], line["verdict"]) for line in self.lines])


def find(root: Path | None) -> dict[str, list[Rerun]]:
    """Each table (by sweep) measured again in a sub-folder of `root`, oldest first."""
    found: dict[str, list[Rerun]] = {}
    for path in sorted(root.glob(f"*/{verdict_file.NAME}")) if root is not None and root.is_dir() else []:
        by_sweep: dict[str, list[dict]] = {}
        for line in verdict_file.read(path):
            by_sweep.setdefault(line["sweep"], []).append(line)
        for sweep, lines in by_sweep.items():
            found.setdefault(sweep, []).append(Rerun(path.parent.name, lines))
    for reruns in found.values():
        reruns.sort(key=lambda r: r.last_cell)
    return found


@dataclass(frozen=True)
class Shown:
    """The verdict a glance line shows for a headline claim: here, or in the folder that measured it again."""
    label: str
    detail: str
    klass: str
    where: Rerun | None    # None: this page's own measurement


def newest(here_label: str, here_verdict: str, here_detail: str, here_class: str, here_last: str, check: str,
           reruns: list[Rerun]) -> Shown:
    """The newest decided verdict of `check` among this page's and its reruns' (by their newest
    cell); the newest verdict when none is decided."""
    found = [(here_last, here_verdict, Shown(here_label, here_detail, here_class, None))]
    for rerun in reruns:
        line = rerun.line_of(check)
        if line is not None:
            found.append((rerun.last_cell, line["verdict"],
                          Shown(line["label"], line["detail"], line["class"], rerun)))
    decided = [f for f in found if f[1] in DECIDED]
    return max(decided or found, key=lambda f: f[0])[2]
