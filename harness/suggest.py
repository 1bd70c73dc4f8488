"""The "did you mean" of a mistyped name (a sweep, a study, a config key), and a path as the user
gave it beside where it resolves: the two things a one-sentence error needs to be fixed at once."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'did you mean 'x'? ' for the closest choice, or '' when none is close (difflib's ratio >= 0.6)."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def shown_path(path: str | Path) -> str:
    """A relative path with where it resolves from here ('../data (= /work/data)'); an absolute one as given."""
    given = Path(path)
    if given.is_absolute():
        return str(given)
    return f"{given} (= {given.resolve()})"
