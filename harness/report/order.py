"""The documents' order of the sweeps, read from their titles: the report lists its tables, and
`harness reproduce` runs its sweeps, as the book and d2l number them (T6.1, Table 7.1, T7, T9.1,
T9.2/T9.3, T10.2, D12.1, D12.2, D12.3 and its exercises, D12.5, D12.6 and its exercises).

A title starts with its label: "T" or "Table " (the book) or "D" (d2l), a chapter and maybe a
section. Within a chapter a numbered section comes first and the chapter's own table (T7) after
them; an exercise follows its section. A title without a label goes last, by name. The label as the
document writes it (`document_label`) names a table in the report and in the docs' tables."""

from __future__ import annotations

import math
import re

_LABEL = re.compile(r"^(?:Table |T|D)(\d+)(?:\.(\d+))?(?:/\S+)?( exercise)?(?: (\d+))?")
# The label as the document gives it: "T9.2/T9.3", "Table 7.1", "D12.3 exercise 2".
_SHOWN_LABEL = re.compile(r"^(Table \d+(?:\.\d+)?|[TD]\d[\w./]*)( exercise(?: \d+)?)?")


def document_key(name: str, title: str) -> tuple:
    found = _LABEL.match(title)
    if not found:
        return (math.inf, math.inf, 1, 0, name)
    chapter, section, exercise, number = found.groups()
    return (int(chapter), int(section) if section else math.inf, int(bool(exercise)),
            int(number) if exercise and number else 0, name)


def in_document_order(titles: dict[str, str]) -> list[str]:
    """Sweep names (keys) sorted by their titles (values) into the documents' order."""
    return sorted(titles, key=lambda name: document_key(name, titles[name]))


def document_label(title: str) -> str:
    """The label a title starts with, as the document gives it ("T9.2/T9.3", "D12.3 exercise 2"), or
    "" for a title without one."""
    found = _SHOWN_LABEL.match(title)
    return "".join(g for g in found.groups() if g) if found else ""
