"""The checks a sweep file may write ([[checks]] entries): the kinds, the keys each kind takes, what
a check may `need` of the machine, and what is wrong with one as written. The sweep file's model
reads this to stop a mistyped check before any cell runs; the report (harness/report/checks.py)
judges the checks and keeps one judge per kind named here. Imports nothing of the harness, so the
sweep files' model need not reach up to the report for it."""

from __future__ import annotations

# What a check may say the document's machine had (`needs = { cores = 16 }`); the report reads
# what the cells ran on against these (harness/report/machine.py).
NEEDS = ("cores", "gpus", "native", "backend")

# Each kind's required keys and its own optional ones; _COMMON are every kind's.
_FIELDS = {
    "exact": ({"metric", "expected"}, set()),
    "trend": ({"metric", "x"}, {"direction", "min_correlation"}),
    "ratio": ({"metric", "tolerance"}, {"published"}),
    "bound": ({"metric"}, {"min", "max"}),
    "compare": ({"metric", "where", "against"}, {"min_ratio", "max_ratio", "within"}),
    "best": ({"metric", "goal", "row"}, set()),
    "flat": ({"metric", "tolerance"}, set()),
}
_COMMON = {"kind", "text", "where", "needs", "scales", "on", "reason"}
KINDS = tuple(_FIELDS)


def problem(check: dict) -> str | None:
    """What is wrong with a check as written in a sweep file, in one sentence; None when nothing is."""
    kind = check.get("kind")
    if kind not in _FIELDS:
        return f"unknown check kind {kind!r}; known: {', '.join(_FIELDS)}"
    required, optional = _FIELDS[kind]
    missing = [k for k in sorted(required) if k not in check]
    if missing:
        return f"a '{kind}' check needs {', '.join(repr(k) for k in missing)}"
    unknown = [k for k in check if k not in required | optional | _COMMON]
    if unknown:
        return (f"unknown key {unknown[0]!r} in a '{kind}' check; it takes "
                f"{', '.join(sorted(required | optional | _COMMON))}")
    one_of = {"bound": ("min", "max"), "compare": ("min_ratio", "max_ratio", "within")}.get(kind, ())
    if one_of and not any(k in check for k in one_of):
        return f"a '{kind}' check needs at least one of {', '.join(one_of)}"
    for key in ("expected", "min_correlation", "tolerance", "min", "max", "min_ratio", "max_ratio", "within"):
        if key in check and (isinstance(check[key], bool) or not isinstance(check[key], (int, float))):
            return f"'{key}' must be a number, not {check[key]!r}"
    for key in ("where", "against", "row", "needs"):
        if key in check and not isinstance(check[key], dict):
            return f"'{key}' must be a table, like {key} = {{ name = value }}"
    if check.get("direction", "decreasing") not in ("increasing", "decreasing"):
        return f"direction must be 'increasing' or 'decreasing', not {check['direction']!r}"
    if kind == "best" and check["goal"] not in ("lowest", "highest"):
        return f"goal must be 'lowest' or 'highest', not {check['goal']!r}"
    unknown_needs = [k for k in check.get("needs", {}) if k not in NEEDS]
    if unknown_needs:
        return f"unknown need {unknown_needs[0]!r}; a check may need {', '.join(NEEDS)}"
    if not isinstance(check.get("scales", []), list):
        return "'scales' must be a list of scale names, like scales = [\"full\"]"
    if check.get("on", "published") not in ("published", "ours"):
        return f"on must be 'ours' (the published rows cannot judge it) or 'published', not {check['on']!r}"
    if check.get("on") == "ours" and not check.get("reason"):
        return "a check with on = \"ours\" needs a reason: why the published rows cannot judge it"
    return None
