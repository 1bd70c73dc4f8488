"""The `harness` command lines a sweep's summary and report print for a user to paste
(`--remeasure-contended`, `--remeasure-drifted`, `--until-decided`, `harness report`).

A hint that drops part of the command that measured the cells measures another sweep when pasted:
without `--scale` the full scale, without the `--set` overrides the file's own grid, without
`--tracking-uri` another store. So each hint names the sweep as it was loaded (its name, or the
path of a file outside sweeps/), its scale, its overrides and its store, quoted for a POSIX shell.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.folders import SWEEPS_DIR

# A store URI that carries a password is never printed whole (harness/store/uris.py, redact); where
# it came from this environment variable, the hint reads it from there instead.
STORE_VARIABLE = "MLFLOW_TRACKING_URI"


@dataclass(frozen=True)
class Rerun:
    """What a sweep's cells were measured with, as the command line's own words."""
    sweep: str                    # the sweep's name, or the absolute path of its file
    scale: str
    sets: tuple[str, ...] = ()    # each --set as KEY=VALUE, in the form the command line parses back
    store: str | None = None      # the --tracking-uri argument, already quoted; None: not needed

    def sweep_command(self, *flags: str) -> str:
        """`harness sweep ...` with `flags` added (--remeasure-contended, --until-decided)."""
        return self._command("sweep", *flags)

    def report_command(self) -> str:
        """`harness report ...` of the same scale and store."""
        return self._command("report")

    def _command(self, verb: str, *flags: str) -> str:
        words = ["harness", verb, self.sweep, "--scale", self.scale]
        if verb == "sweep":
            words += [w for assignment in self.sets for w in ("--set", assignment)]
        store = [f"--tracking-uri {self.store}"] if self.store is not None else []   # quoted already
        return " ".join([shlex.join(words), *store, *(shlex.quote(f) for f in flags)])


def of_invocation(spec, scale: str, overrides: dict[str, Any] | None, store_uri: str) -> Rerun:
    """The command of one invocation: its spec, scale, overrides (after --device) and store."""
    return Rerun(_sweep_argument(spec), scale, _assignments(overrides or {}), _store_argument(store_uri))


def of_parent(spec, scale: str, parent_params: dict[str, str] | None, store_uri: str) -> Rerun:
    """The command of the invocation whose parent run logged `parent_params` (its `overrides` param
    is the overrides dict as Python writes it). A parent without one (an older store) gives no
    overrides."""
    overrides: dict[str, Any] = {}
    text = (parent_params or {}).get("overrides")
    if text:
        try:
            found = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            found = None
        if isinstance(found, dict):
            overrides = found
    return of_invocation(spec, scale, overrides, store_uri)


def _sweep_argument(spec) -> str:
    """The name where the shipped sweeps/ folder has the file (the command finds it by name from
    any folder); else the file's absolute path (a relative one breaks in another folder)."""
    if spec.path is None:   # a spec made in code, not read from a file
        return spec.name
    path = Path(spec.path).resolve()
    return spec.name if path.parent == SWEEPS_DIR.resolve() and path.stem == spec.name else str(path)


def _assignments(overrides: dict[str, Any]) -> tuple[str, ...]:
    """Each override as the --set text parse_assignment reads back to the same value: a list as
    JSON (`sparsity=[0.0,0.5]`), anything else as its text."""
    return tuple(f"{key}={json.dumps(value, separators=(',', ':')) if isinstance(value, list) else value}"
                 for key, value in overrides.items())


def _store_argument(uri: str) -> str | None:
    """--tracking-uri's argument, quoted, or None where the pasted command finds the same store
    without it (the default store, and no MLFLOW_TRACKING_URI to point elsewhere)."""
    from harness.store.uris import DEFAULT_TRACKING_URI, redact

    given = os.environ.get(STORE_VARIABLE)
    if uri == DEFAULT_TRACKING_URI and not given:
        return None
    if redact(uri) != uri:
        return f'"${STORE_VARIABLE}"' if given == uri else shlex.quote(redact(uri))
    return shlex.quote(uri)
