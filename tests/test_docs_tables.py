"""The README's sweeps table and docs/EXPERIMENTS.md's experiments table are what the sweep files and
the descriptors say (`make docs` writes them: harness/report/docs_tables.py). A committed page that
differs fails here with the command that writes it again; only the lines between a table's markers
are written, the prose around them is the hand's; and the metadata the tables are read from is there
for every sweep file and experiment."""

from __future__ import annotations

import tomllib

import pytest

import experiments
from harness.errors import UserError
from harness.folders import REPO_ROOT, SWEEPS_DIR, project_path
from harness.report import docs_tables
from harness.report.order import in_document_order
from harness.specs import sweep_spec

SWEEPS, EXPERIMENTS = docs_tables.GENERATED


def test_the_committed_tables_are_what_the_sweep_files_and_descriptors_say():
    stale = docs_tables.stale()
    assert not stale, (f"{', '.join(project_path(p) for p in stale)}: a generated table is out of date; write it "
                       f"again with `make docs`")


def _table(generated: docs_tables.Generated) -> list[str]:
    lines = generated.page.read_text().split("\n")
    first = lines.index(generated.start)
    return lines[first + 1:lines.index(docs_tables.END, first + 1)]


def test_every_sweep_file_has_its_row_and_every_experiment_its_row():
    sweep_rows, experiment_rows = _table(SWEEPS)[2:], _table(EXPERIMENTS)[2:]
    assert [row.split(" | ")[0].split("`")[1] for row in sweep_rows] == \
        [f"make sweep-{name}" for name in in_document_order(
            {n: sweep_spec.load(n).title for n in sweep_spec.available()})]
    assert sorted(row.split("`")[1] for row in experiment_rows) == sorted(experiments.names())


def test_every_sweep_file_says_what_it_measures_in_its_own_words():
    """`measures` is the file's own (a file that extends another would inherit its parent's)."""
    unsaid = [p.name for p in sorted(SWEEPS_DIR.glob("*.toml"))
              if not p.stem.startswith("study_") and not tomllib.loads(p.read_text()).get("measures")]
    assert unsaid == [], f"say in `measures` what these sweep files measure: {unsaid}"


@pytest.mark.parametrize("name", experiments.names())
def test_every_card_starts_with_the_question_its_experiment_answers(name):
    assert docs_tables.question(name).endswith("?")


def test_only_the_lines_between_the_markers_are_written():
    text = f"prose before\n\n{SWEEPS.start}\n| an old table |\n{docs_tables.END}\n\nprose after\n"
    written = docs_tables.page_with(text, SWEEPS)
    assert written.startswith(f"prose before\n\n{SWEEPS.start}\n| target | table | what it measures |")
    assert written.endswith(f"|\n{docs_tables.END}\n\nprose after\n") and "an old table" not in written
    assert docs_tables.page_with(written, SWEEPS) == written


@pytest.mark.parametrize("text, words", [
    ("a page without the table's lines\n", ["README.md has no line '<!-- generated: sweeps table", "where the table goes"]),
    (f"{SWEEPS.start}\n| a table never closed |\n", ["README.md: the sweeps table has no line '<!-- end generated -->'"]),
])
def test_a_page_without_its_marker_lines_is_one_sentence_naming_them(text, words):
    with pytest.raises(UserError) as err:
        docs_tables.page_with(text, SWEEPS)
    for word in words:
        assert word in str(err.value)


def test_make_docs_writes_the_tables_and_make_help_lists_it():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "\ndocs: ## " in makefile and "$(BIN)/python -m harness.report.docs_tables" in makefile
    phony = makefile.split("\n.PHONY:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ").split()
    assert "docs" in phony   # docs/ is a folder: a target of that name must be phony, or make calls it up to date
