"""Exceptions with a meaning for the user and for the engines, and the one way an exception becomes
a line of text."""

from __future__ import annotations

import re


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


def first_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, whitespace collapsed: what a user is shown of a
    library's multi-line error (MLflow and SQLAlchemy append pages of context)."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return re.sub(r"\s+", " ", line)[:limit]
