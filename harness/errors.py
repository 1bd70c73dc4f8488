"""Exceptions with a meaning for the user and for the engines, the one way an exception becomes a
line of text, and the one way pydantic's validation errors become a sentence."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


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
    """One of pydantic's validation errors, as every reader of a config, a sweep or study file, a
    check or a sampler words it (`sentence`)."""
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
        """The message to go inside a sentence: its first letter lowered, pydantic's "Input should
        be ..." said as "should be ..." (the sentence names the key)."""
        message = self.message.removeprefix("Input ") if self.message.startswith("Input should") else self.message
        return message[:1].lower() + message[1:]

    def sentence(self, where: str, takes: Iterable[str] = ()) -> str:
        """This mistake as one sentence about `where` ("sweep file sweeps/x.toml", "[sampler] tpe", "a
        'ratio' check", "config"), without its full stop; `takes`: the keys `where` takes, for an
        unknown key's "did you mean" or, with none close, their list."""
        if self.type == "extra_forbidden":
            takes = [str(k) for k in takes] if len(self.loc) == 1 else []
            # harness.suggest's "did you mean" (difflib's closest at 0.6), asked of difflib here: the
            # bottom floor imports nothing of the harness, suggest.py included
            close = difflib.get_close_matches(self.key, takes, n=1)
            return f"{where}: unknown key '{self.key}'" + (f"; did you mean '{close[0]}'?" if close else
                                                           f"; it takes {', '.join(takes)}" if takes else "")
        if self.type == "missing":
            return f"{where} needs '{self.key}'"
        if not self.loc:   # a rule over several keys: the value it was given is the whole table, not shown
            return f"{where}: {self.said}"
        return f"{where}: key '{self.key}': {self.said} (got {self.value!r})"


def mistakes(err) -> list[Mistake]:
    """A pydantic ValidationError's errors, in its order."""
    return [Mistake(tuple(e["loc"]), e["type"], e["msg"].removeprefix("Value error, "), e.get("input"),
                    str(e.get("ctx", {}).get("expected", ""))) for e in err.errors()]


def first_mistake(found: list[Mistake], order: Sequence[str] = ()) -> Mistake:
    """The mistake a reader fixes first: a missing key, then the others in the order of the model's
    fields (`order`; a key that is none of them after those), then a rule over several keys."""
    missing = [m for m in found if m.type == "missing"]
    if missing:
        return missing[0]
    keyed = [m for m in found if m.loc]
    if not keyed:
        return found[0]
    return min(keyed, key=lambda m: order.index(m.loc[0]) if m.loc[0] in order else len(order))


def describe(err, where: str, takes: Iterable[str] = (), order: Sequence[str] = ()) -> str:
    """A pydantic ValidationError as the one sentence every reader gives (without its full stop): its
    first mistake (`first_mistake`) about `where`, every missing key named at once."""
    found = mistakes(err)
    missing = [m.key for m in found if m.type == "missing"]
    if missing:
        return f"{where} needs {', '.join(repr(k) for k in missing)}"
    return first_mistake(found, order).sentence(where, takes)


def full_stop(sentence: str) -> str:
    """The sentence ended with a full stop, unless it ends in a question ("did you mean 'x'?")."""
    return sentence if sentence.endswith(("?", ".")) else sentence + "."


def first_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, whitespace collapsed: what a user is shown of a
    library's multi-line error (MLflow and SQLAlchemy append pages of context)."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return re.sub(r"\s+", " ", line)[:limit]
