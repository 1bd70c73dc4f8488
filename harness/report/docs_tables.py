"""The docs' tables that the sweep files and the experiments' descriptors already say: the README's
sweeps table and docs/EXPERIMENTS.md's experiments table, written by `make docs` from them (as
Composer writes its methods table from each method's metadata), so a sweep file or an experiment
added is in them at the next writing; tests/test_docs_tables.py fails while a committed page is not
what this writes.

Each table stands between its marker line (`Generated.start`) and `<!-- end generated -->`; only
what is between them is written, and the prose around stays as written by hand.
- README.md, the sweeps table: one row per sweep file, in the documents' order (harness/report/
  order.py): its make target (and the target of the file it extends, which runs it too), its table
  (the label its `title` starts with, and where its `source` says it is: the source's first words,
  before any comma, colon, semicolon or bracket), what it `measures`, and what it sets our figures
  beside (`[published]`: its rows and their `machine`; its checks).
- docs/EXPERIMENTS.md, the experiments table: one row per experiment, in the order of its first
  table: its name, its run module and the modules of experiments/ that module imports, its sweep
  and study files with their labels, and its question: the first paragraph of its descriptor's card.

Nothing here imports torch: the files and the descriptors are read as `harness list` reads them,
and a run module's imports are read from its source.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import experiments
from harness.errors import UserError
from harness.folders import REPO_ROOT, project_path
from harness.report.order import document_key, document_label, in_document_order
from harness.specs import specfile, study_spec, sweep_spec
from harness.specs.extends import KEY as EXTENDS
from harness.specs.specfile import SpecFile

END = "<!-- end generated -->"


@dataclass(frozen=True)
class Generated:
    """A table of a page that `make docs` writes."""
    page: Path
    name: str                  # "sweeps table"
    read_from: str             # what to edit instead of the table
    table: Callable[[], str]   # the table's lines, as one text

    @property
    def start(self) -> str:
        """The line the table follows."""
        return f"<!-- generated: {self.name}, by `make docs` from {self.read_from}; edit those, not the table -->"


# --- the tables ------------------------------------------------------------------------------------
def sweeps_table() -> str:
    """One row per sweep file, in the documents' order."""
    specs = {name: sweep_spec.load(name) for name in sweep_spec.available()}
    rows = []
    for name in in_document_order({n: s.title for n, s in specs.items()}):
        spec = specs[name]
        if not spec.measures:
            raise UserError(f"sweep file {spec.shown} has no `measures`: say in one line what its grid varies and "
                            f"what is read, for the README's sweeps table.")
        rows.append((_target(spec), _table_name(spec), spec.measures, _published(spec)))
    return _markdown(("target", "table", "what it measures", "published figures; checks"), rows)


def experiments_table() -> str:
    """One row per experiment, in the order of its first sweep or study file."""
    files: dict[str, list[SpecFile]] = {}
    specs = [*(sweep_spec.load(n) for n in sweep_spec.available()),
             *(study_spec.load(n) for n in study_spec.available())]
    for spec in sorted(specs, key=lambda s: document_key(s.name, s.title)):
        files.setdefault(spec.experiment, []).append(spec)

    def first_table(name: str) -> tuple:
        # an experiment that no file runs yet goes last, by name
        own = files.get(name)
        return (0, document_key(own[0].name, own[0].title)) if own else (1, name)

    rows = [(f"`{name}`", ", ".join(f"`{m.replace('.', '/')}.py`" for m in modules_of(name)),
             ", ".join(_file_name(spec) for spec in files.get(name, [])), question(name))
            for name in sorted(experiments.names(), key=first_table)]
    return _markdown(("experiment", "module", "sweeps and studies", "the question"), rows)


def question(name: str) -> str:
    """The question an experiment answers: the first paragraph of its descriptor's card, on one line."""
    found = " ".join(experiments.card(name).split("\n\n", 1)[0].split())
    if not found:
        raise UserError(f"experiment '{name}' has no card: its descriptor's docstring starts with the question it "
                        f"answers, for docs/EXPERIMENTS.md.")
    return found


def modules_of(name: str) -> list[str]:
    """The module an experiment's run is in, then the modules of experiments/ it imports (not its
    descriptor), read from its source without running it."""
    module = experiments.get(name).run_module
    found = [module]
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "experiments":
            named = [f"experiments.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            named = [node.module]
        elif isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        else:
            continue
        # a module right under experiments/ (finding it imports no more than the experiments package)
        found += [m for m in named if m.startswith("experiments.") and m.count(".") == 1
                  and m != "experiments.descriptors" and m not in found and importlib.util.find_spec(m) is not None]
    return found


# --- what a row says of a file -----------------------------------------------------------------------
def _target(spec: sweep_spec.SweepSpec) -> str:
    parent = specfile.read_toml(spec.path, "sweep").get(EXTENDS)
    return f"`make sweep-{spec.name}`" + (f" (and `make sweep-{parent}`)" if parent else "")


def _table_name(spec: SpecFile) -> str:
    """The table's label and where the document says it: "T6.1 (book ch. 6)"."""
    where = re.split(r"\s*[,:;(]", spec.source, maxsplit=1)[0].strip()
    return " ".join(part for part in (_label(spec.title), f"({where})" if where else "") if part)


def _file_name(spec: SpecFile) -> str:
    label = _label(spec.title)
    return f"`{spec.name}`" + (f" ({label})" if label else "")


def _label(title: str) -> str:
    """The document's label a title starts with ("T6.1"), or the one word before its colon
    ("airbench94: ..."), or ""."""
    head, colon, _ = title.partition(":")
    return document_label(title) or (head if colon and head and " " not in head else "")


def _published(spec: sweep_spec.SweepSpec) -> str:
    rows, machine = spec.published.get("rows", []), spec.published.get("machine")
    figures = (_count(len(rows), "row") + (f" on {machine}" if machine else "")) if rows else "none"
    return f"{figures}; {_count(len(spec.checks), 'check')}"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _markdown(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    return "\n".join([_line(header), "|" + "---|" * len(header), *(_line(row) for row in rows)])


def _line(cells: tuple[str, ...]) -> str:
    # a cell is one line, and a bar in it is text, not a column
    return "| " + " | ".join(" ".join(str(c).split()).replace("|", "\\|") for c in cells) + " |"


# --- the pages ------------------------------------------------------------------------------------------
GENERATED = (
    Generated(REPO_ROOT / "README.md", "sweeps table", "each sweep file's title, source, measures, "
              "[published] and checks", sweeps_table),
    Generated(REPO_ROOT / "docs" / "EXPERIMENTS.md", "experiments table", "the descriptors' cards and the sweep "
              "and study files", experiments_table),
)


def page_with(text: str, generated: Generated) -> str:
    """The page `text` with its generated table written anew between its marker lines."""
    lines = text.split("\n")
    shown = project_path(generated.page)
    if generated.start not in lines:
        raise UserError(f"{shown} has no line '{generated.start}' for the {generated.name} to follow; put it, and "
                        f"'{END}' after it, where the table goes.")
    first = lines.index(generated.start)
    if END not in lines[first + 1:]:
        raise UserError(f"{shown}: the {generated.name} has no line '{END}' after its start; put it where the "
                        f"table ends.")
    last = lines.index(END, first + 1)
    return "\n".join([*lines[:first + 1], generated.table(), *lines[last:]])


def pages() -> dict[Path, str]:
    """Each page as `make docs` writes it: its committed text, its tables written anew."""
    written: dict[Path, str] = {}
    for generated in GENERATED:
        text = written[generated.page] if generated.page in written else generated.page.read_text()
        written[generated.page] = page_with(text, generated)
    return written


def stale() -> list[Path]:
    """The pages whose committed tables are not what the files and descriptors say."""
    return [path for path, text in pages().items() if path.read_text() != text]


def write() -> list[Path]:
    """Write each page whose tables are out of date; the pages written."""
    written = []
    for path, text in pages().items():
        if path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


if __name__ == "__main__":
    try:
        changed = write()
    except UserError as err:
        sys.exit(f"harness: error: {err}")
    print("written: " + ", ".join(project_path(p) for p in changed) if changed else "the docs' tables were up to date")
