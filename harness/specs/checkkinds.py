"""The kinds of check a sweep file's `[[checks]]` may hold, as typed models: each kind's parameters
with their defaults, and the one sentence a mistyped entry gets. Sweep files are read against these
(harness/specs/sweep_spec.py), so a wrong check stops the sweep before it runs; the report judges them
(harness/report/checks.py, whose docstring shows each kind in TOML). A new kind is a model here,
its line in KINDS, and its judge in the report's JUDGES.

Every kind takes `metric`, `text` (the claim in words), `where` (the rows it reads: axis -> a value
or a list of values), `needs` (what the document's machine had that the claim depends on),
`scales` (judged only at these), `on` (+ `reason`) for a claim the published rows cannot judge,
`assumes` / `stand_ins` (the settings the claim is about, and those that stand in for them) and
`claim` (a published claim, the project's goal, a consistency check or a computed fact).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, ValidationError, model_validator

from harness.errors import Mistake, describe, first_mistake, mistakes

Number = StrictInt | StrictFloat   # as written: an `expected = 1059306` stays an int in the report's text
Rows = dict[str, Any]             # axis -> a value, or a list of values


class Needs(BaseModel):
    """What the document's machine had that a claim depends on; a FAIL measured without it may be
    "DIFFERS: machine" (harness/report/measured_on.py says when)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    cores: StrictInt | None = None                 # at least this many CPU cores
    gpus: StrictInt | None = None                  # at least this many GPUs, and the cells ran on them
    native: str | list[str] | None = None          # the device computes this dtype (these dtypes) itself
    backend: str | list[str] | None = None         # this torch.distributed backend exists


NEEDS = tuple(Needs.model_fields)


class Check(BaseModel):
    """What every kind takes."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    # The keys a kind needs at least one of (a bound with neither min nor max bounds nothing).
    one_of: ClassVar[tuple[str, ...]] = ()

    kind: str
    metric: str
    text: str = ""                                   # the claim in words, and where it comes from
    where: Rows | None = None                        # the rows it reads; None: every row
    needs: Needs = Needs()
    scales: list[str] = []                           # judged only at these scales; empty: at every one
    on: Literal["published", "ours"] = "published"   # "ours": the published rows cannot judge it ...
    reason: str = ""                                 # ... and why
    # The settings the claim assumes (model, dataset, dtype -> a value or a list): a table whose cells
    # ran others is N/A for it (a parameter count is the book's CNN's, not tiny_cnn's) ...
    assumes: Rows | None = None
    # ... unless they ran a stand-in named here (dataset = "imagefolder": CIFAR-10 as JPEGs): the
    # verdict is then judged and labelled a stand-in.
    stand_ins: Rows | None = None
    # What the check is evidence of: a document's claim ("published"), this project's own goal
    # ("goal", counted apart), a consistency check of the measurement itself ("consistency":
    # true by construction on some machines, counted apart, never as a reproduced claim), or a
    # figure our own code computes the same way on every run ("computed": a FLOP count, outputs
    # equal by construction; no machine's noise moves it, so it is a fact, never a measured claim).
    claim: Literal["published", "goal", "consistency", "computed"] = "published"

    @model_validator(mode="after")
    def _complete(self) -> "Check":
        if self.one_of and all(getattr(self, k) is None for k in self.one_of):
            raise ValueError(f"needs at least one of {', '.join(self.one_of)}")
        if self.on == "ours" and not self.reason:
            raise ValueError("on = \"ours\" needs a reason: why the published rows cannot judge it")
        return self

    @property
    def name(self) -> str:
        """The check in words: its `text`, else what it is."""
        return self.text or f"{self.kind} check of {self.metric}"

    def row_sets(self) -> dict[str, Rows]:
        """The row selections it names (`where`, `against`, `row`), each by its key."""
        return {k: getattr(self, k) for k in ("where", "against", "row") if getattr(self, k, None) is not None}


class Exact(Check):
    """An exact fact: the metric equals `expected` at every row it reads."""
    kind: Literal["exact"] = "exact"
    expected: Number


class Trend(Check):
    """Spearman rank correlation of the metric against `x`, in the stated direction."""
    kind: Literal["trend"] = "trend"
    x: str
    direction: Literal["increasing", "decreasing"] = "decreasing"
    min_correlation: Number = 0.8                    # |rho| needed, in the stated direction


class Ratio(Check):
    """Our figure against the published one, row by row: |ours / published - 1| <= tolerance."""
    kind: Literal["ratio"] = "ratio"
    tolerance: Number
    published: str | None = None                     # the published column; None: book_<metric>
    max: Number | None = None                        # and our figure at most this (2 devices: 2x)

    @property
    def published_column(self) -> str:
        return self.published or f"book_{self.metric}"


class Bound(Check):
    """A floor and/or a ceiling on our own figure."""
    kind: Literal["bound"] = "bound"
    one_of: ClassVar[tuple[str, ...]] = ("min", "max")
    min: Number | None = None
    max: Number | None = None


class Compare(Check):
    """The metric at `where` against the same metric at `against`, paired on the axes both leave alike."""
    kind: Literal["compare"] = "compare"
    one_of: ClassVar[tuple[str, ...]] = ("min_ratio", "max_ratio", "within")
    where: Rows
    against: Rows
    min_ratio: Number | None = None                  # ours/against at least
    max_ratio: Number | None = None                  # ours/against at most
    within: Number | None = None                     # |ours - against| at most


class Best(Check):
    """The stated row has the lowest (or highest) value of all rows; a tie is not a win."""
    kind: Literal["best"] = "best"
    goal: Literal["lowest", "highest"]
    row: Rows


class Flat(Check):
    """No effect: (largest - smallest) / smallest across the rows at most `tolerance`."""
    kind: Literal["flat"] = "flat"
    tolerance: Number


KINDS: dict[str, type[Check]] = {"exact": Exact, "trend": Trend, "ratio": Ratio, "bound": Bound,
                                 "compare": Compare, "best": Best, "flat": Flat}
_TABLES = ("where", "against", "row", "needs", "assumes", "stand_ins")


def parse(entry: Check | dict[str, Any]) -> Check:
    """A `[[checks]]` entry as its kind's model; a mistake raises ValueError with one sentence."""
    if isinstance(entry, Check):
        return entry
    if not isinstance(entry, dict):
        raise ValueError(f"a check must be a table with a kind, like kind = \"bound\" (got {entry!r})")
    kind = entry.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"unknown check kind {kind!r}; known: {', '.join(KINDS)}")
    model = KINDS[kind]
    try:
        return model.model_validate(entry)
    except ValidationError as err:
        raise ValueError(_sentence(model, kind, entry, err)) from None


def _sentence(model: type[Check], kind: str, entry: dict[str, Any], err: ValidationError) -> str:
    """The first mistake of an entry, as the sweep file's author would fix it (harness/errors.py: what
    is missing, then the others in the order of the model's fields), a mistyped value said in the
    shapes a check's values take."""
    where, order = f"a '{kind}' check", list(model.model_fields)
    first = first_mistake(mistakes(err), order)
    if first.type == "extra_forbidden" and first.loc[0] == "needs" and len(first.loc) > 1:
        return f"{where}: unknown need {first.loc[-1]!r}; a check may need {', '.join(NEEDS)}"
    if first.type in ("missing", "extra_forbidden") or not first.loc:
        return describe(err, where, takes=sorted(model.model_fields), order=order)
    # A top-level key's own value (a union's error points inside it, at the member it tried).
    key = str(first.loc[0])
    told = replace(first, loc=(key,), value=entry.get(key), message=_words(first))
    if key in _TABLES and not isinstance(told.value, dict):
        told = replace(told, message=f"must be a table, like {key} = {{ name = value }}")
    elif key == "needs":
        told = replace(first, loc=first.loc[:2], message=_words(first))
    elif key == "scales":
        told = replace(told, message="must be a list of scale names, like scales = [\"full\"]")
    return told.sentence(where)


def _words(error: Mistake) -> str:
    """What a mistyped value should have been, from pydantic's error."""
    if error.type == "literal_error":
        return f"must be {error.expected}"          # "'lowest' or 'highest'"
    if error.type.startswith(("int", "float")):
        return "must be a number"
    if error.type.startswith("string"):
        return "must be a string in quotes"
    return error.said
