"""Exceptions with a meaning for the user and for the engines, and the one way an exception becomes
a line of text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class UserError(Exception):
    """A mistake in what the user asked for. The CLI prints the message as one sentence and exits 2."""


class StoreFault(Exception):
    """The tracking store or the shared database refused a read or a write while the harness was
    working (disk full, file made read-only, server gone). Not a mistake in the request: the engines
    close what they can, keep what is measured, and the CLI prints the sentence and exits 1."""


class StoreGone(StoreFault):
    """The tracking store is no longer the one the invocation opened (its SQLite file was deleted
    or replaced): whatever was logged since went nowhere, so nothing may be reported as kept."""


class CellSkipped(Exception):
    """This cell cannot run here (missing backend, too few devices, no GPU). The sweep records the
    reason and goes on; the cell is tried again on the next invocation."""


class CellPruned(Exception):
    """A study's pruner stopped this trial early (its per-epoch accuracy was too weak). Recorded as
    pruned, not failed."""


@dataclass(frozen=True)
class Mistake:
    """One of pydantic's validation errors as the sentences about a config, a sweep or study file, a
    check or a sampler read it (each words its own sentence from these parts)."""
    loc: tuple            # where: the field, and the keys inside it
    type: str             # pydantic's error type: missing, extra_forbidden, literal_error, ...
    message: str          # its message, without pydantic's "Value error, " (a rule's own sentence)
    value: Any            # the value given
    expected: str = ""    # a literal's choices ("'lowest' or 'highest'")

    @property
    def key(self) -> str:
        """The dotted location ("" for a rule across fields)."""
        return ".".join(str(p) for p in self.loc)

    @property
    def said(self) -> str:
        """The message to go inside a sentence: its first letter lowered."""
        return self.message[:1].lower() + self.message[1:]


def mistakes(err) -> list[Mistake]:
    """A pydantic ValidationError's errors, in its order."""
    return [Mistake(tuple(e["loc"]), e["type"], e["msg"].removeprefix("Value error, "), e.get("input"),
                    str(e.get("ctx", {}).get("expected", ""))) for e in err.errors()]


def first_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, whitespace collapsed: what a user is shown of a
    library's multi-line error (MLflow and SQLAlchemy append pages of context)."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return re.sub(r"\s+", " ", line)[:limit]
