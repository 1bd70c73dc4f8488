"""What the recompute reads: a folder's store (read-only, SQLite as MLflow writes it) and the sweep
files beside the code, with the two rules every reading shares: how a param is read back, and when
two figures are the same."""
from __future__ import annotations

import importlib.util
import math
import pathlib
import sqlite3


def same(a, b) -> bool:
    """Two figures agree: both missing, or equal to 1e-9 (a CSV keeps 17 digits)."""
    a, b = _float(a), _float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _float(value) -> float:
    if value is None or value == "":
        return math.nan
    return float(value)


def number(text):
    """A param as the report reads it: True/False, an int, a float, else the text."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text) if "." in text or "e" in text else int(text)
    except (TypeError, ValueError):
        return text


class Store:
    def __init__(self, folder: pathlib.Path):
        self.db = sqlite3.connect((folder / "store" / "mlflow.db").resolve().as_uri() + "?mode=ro", uri=True)

    def runs(self, sweep: str) -> list[dict]:
        """The live runs tagged with the sweep, newest first, each with its tags, params and metrics."""
        found = []
        query = ("select r.run_uuid, r.start_time from runs r join tags t on t.run_uuid = r.run_uuid "
                 "where t.key = 'harness.sweep' and t.value = ? and r.lifecycle_stage = 'active' "
                 "order by r.start_time desc")
        for run, start in self.db.execute(query, (sweep,)):
            found.append({"id": run, "start": start,
                          "tags": dict(self.db.execute("select key, value from tags where run_uuid = ?", (run,))),
                          "params": dict(self.db.execute("select key, value from params where run_uuid = ?", (run,))),
                          "metrics": dict(self.db.execute("select key, value from latest_metrics where run_uuid = ?",
                                                          (run,)))})
        return found


def table_cells(store: Store, sweep: str, fingerprint: str):
    """The cells the page's table of `sweep` is made of (its finished cells measured on `fingerprint`
    under its newest procedure, at the newest invocation's scale), the cells of that machine that
    did not finish, and the scale."""
    runs = store.runs(sweep)
    parents = [r for r in runs if "mlflow.parentRunId" not in r["tags"]]
    scale = parents[0]["tags"].get("harness.scale", "full")
    cells = [r for r in runs if "mlflow.parentRunId" in r["tags"] and r["tags"].get("harness.scale") == scale
             and r["tags"].get("fingerprint", "unknown") == fingerprint]
    procedure = lambda r: int(number(r["tags"].get("harness.procedure", "0")) or 0)
    newest = max(procedure(r) for r in cells if r["tags"].get("harness.outcome") == "ok")
    current = [r for r in cells if procedure(r) >= newest]
    ok = [r for r in current if r["tags"].get("harness.outcome") == "ok"]
    return ok, [r for r in current if r["tags"].get("harness.outcome") != "ok"], scale


def load_sweep(root: pathlib.Path, name: str) -> dict:
    """The sweep file with what it inherits from the file it extends, if any, and its axes."""
    spec = _extends(root).read(root / "sweeps" / f"{name}.toml")
    axes = []
    grids = [spec.get("grid", {})] + [s["grid"] for s in spec.get("scales", {}).values() if "grid" in s]
    for grid in grids:
        for axis, values in grid.items():
            compound = [k for v in values for k in v] if values and all(isinstance(v, dict) for v in values) else [axis]
            axes += [k for k in dict.fromkeys(compound) if k not in axes]
    spec["axes"] = axes
    return spec


def _extends(root: pathlib.Path):
    """How a sweep file extends another, read from the one file that says it (harness/specs/extends.py,
    which imports nothing but the standard library): a rule of the file format, like TOML's own; every
    figure is still this reader's."""
    found = importlib.util.spec_from_file_location("sweep_extends", root / "harness" / "specs" / "extends.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def repeats_at(spec: dict, scale: str) -> int:
    return spec.get("scales", {}).get(scale, {}).get("repeats", spec.get("repeats", 1))
