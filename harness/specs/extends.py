"""A sweep file that extends another: `extends = "resnet"` names a sweep file of the same folder
(sweeps/resnet.toml), and the file then holds only its own table and what differs: an exercise of a
document's section keeps the section's model, data and scales in one place. One level only (the
idea of hydra's defaults list, without its chains): the parent extends nothing, so a reader sees a
whole sweep in two files at most.

How the two merge (`merge`), the child winning wherever both have a key:
- [base] and each [scales.NAME] merge key by key; a scale only one file has is that file's.
- Everything else is taken whole: the child's if it has the key, else the parent's. So are the
  [grid] and each [scales.NAME.grid] (axes make sense together, never half of one file's and half
  of the other's), [report], [published] and [[checks]] (the child's own table), repeats, source.
- name and title are never inherited: they name the child's own table, and two files of one name
  would write into one MLflow experiment.
- A child with a [grid] of its own inherits none of the parent's scale grids: a scale's grid
  narrows the axes of its own file.
- What the child sweeps is not inherited as a fixed setting: an axis of its [grid] leaves the
  parent's [base] and every scale, an axis of its [scales.NAME.grid] leaves that scale. The parent
  fixed what the child varies, and a scale's fixed value would pin the child's axis to one point.
- `unset = ["scales.quick.epochs"]` leaves out an inherited key (TOML has no null): the parent's
  quick scale sets epochs, this file's quick scale trains base's epochs.

This module imports nothing beyond the standard library: the recompute scripts under results/ read
a sweep file by the same rule without importing the harness (they load this file by its path).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

KEY = "extends"
UNSET = "unset"
OWN = ("name", "title")        # never inherited
MERGED = ("base", "scales")    # merged key by key (a scale's own table too); all else is taken whole


class Refused(ValueError):
    """A mistake in how a file extends another, worded to follow "sweep file X: "."""


def parent_of(child: dict[str, Any], path: Path) -> Path | None:
    """The file `child` (read from `path`) extends, or None; the file need not exist."""
    name = child.get(KEY)
    if name is None:
        if UNSET in child:
            raise Refused(f"{UNSET} leaves out keys a parent sets, and this file extends none "
                          f"(add {KEY} = \"NAME\", or drop {UNSET})")
        return None
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.endswith(".toml"):
        raise Refused(f"{KEY} must name a sweep file of the same folder without its .toml, "
                      f"like {KEY} = \"resnet\" (got {name!r})")
    parent = path.parent / f"{name}.toml"
    if parent.name == path.name:
        raise Refused(f"{KEY} names this very file; name the sweep file it builds on")
    return parent


def merge(parent: dict[str, Any], child: dict[str, Any], parent_file: str = "the parent") -> dict[str, Any]:
    """The sweep file `child` is, given the file it extends (both as read from TOML; neither is
    changed). `parent_file` names the parent in a refusal."""
    if KEY in parent:
        raise Refused(f"it extends {parent_file}, which itself extends '{parent[KEY]}'; a sweep file may "
                      f"extend only one that extends nothing, so extend '{parent[KEY]}' and add here what "
                      f"{parent_file} adds to it")
    inherited = copy.deepcopy(parent)
    for dotted in _unset(child):
        _leave_out(inherited, dotted, parent_file)
    for key in OWN:
        inherited.pop(key, None)
    own = {k: v for k, v in child.items() if k not in (KEY, UNSET)}
    _drop_what_the_child_sweeps(inherited, own)
    merged = {**inherited, **own}
    for key in MERGED:
        if isinstance(inherited.get(key), dict) and isinstance(own.get(key), dict):
            merged[key] = _merge_tables(inherited[key], own[key], nested=key == "scales")
    return merged


def read(path: Path) -> dict[str, Any]:
    """A sweep file with what it inherits, read with the standard library alone (for scripts that
    do not import the harness; the harness reads through harness/specs/sweep_spec.py, which words
    every mistake as a sentence)."""
    child = tomllib.loads(path.read_text(encoding="utf-8"))
    parent = parent_of(child, path)
    if parent is None:
        return child
    return merge(tomllib.loads(parent.read_text(encoding="utf-8")), child, parent.name)


def _unset(child: dict[str, Any]) -> list[str]:
    keys = child.get(UNSET, [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise Refused(f"{UNSET} must be a list of inherited keys written with dots, like "
                      f"{UNSET} = [\"scales.quick.epochs\"] (got {keys!r})")
    return keys


def _leave_out(table: dict[str, Any], dotted: str, parent_file: str) -> None:
    """Takes the key at `dotted` ("scales.quick.epochs") out of `table`; one it lacks is refused (an
    unset that leaves out nothing is a misspelt key)."""
    *path, last = dotted.split(".")
    for part in path:
        table = table.get(part) if isinstance(table, dict) else None
    if not isinstance(table, dict) or last not in table:
        raise Refused(f"{UNSET} names '{dotted}', which {parent_file} does not set")
    del table[last]


def _drop_what_the_child_sweeps(inherited: dict[str, Any], child: dict[str, Any]) -> None:
    """The child's own grids replace the parent's, and what they vary leaves the settings it inherits."""
    scales = inherited.get("scales") if isinstance(inherited.get("scales"), dict) else {}
    child_scales = child.get("scales") if isinstance(child.get("scales"), dict) else {}
    if "grid" in child:
        for scale in scales.values():
            if isinstance(scale, dict):
                scale.pop("grid", None)
    for key in _axes(child.get("grid")):
        for table in (inherited.get("base"), *scales.values()):
            if isinstance(table, dict):
                table.pop(key, None)
    for name, scale in child_scales.items():
        if isinstance(scale, dict) and isinstance(scales.get(name), dict):
            for key in _axes(scale.get("grid")):
                scales[name].pop(key, None)


def _axes(grid: Any) -> list[str]:
    """The config fields a grid varies: each axis, or the fields of a compound axis's tables."""
    if not isinstance(grid, dict):
        return []
    keys: list[str] = []
    for axis, values in grid.items():
        if isinstance(values, list) and values and all(isinstance(v, dict) for v in values):
            keys += [k for value in values for k in value]
        else:
            keys.append(axis)
    return list(dict.fromkeys(keys))


def _merge_tables(parent: dict[str, Any], child: dict[str, Any], nested: bool) -> dict[str, Any]:
    """Key by key, the child winning, in the parent's order with the child's new keys after; with
    `nested` (the scales), each scale's own table merged the same way, one level down."""
    merged = {**parent, **child}
    if nested:
        for name in parent.keys() & child.keys():
            if isinstance(parent[name], dict) and isinstance(child[name], dict):
                merged[name] = {**parent[name], **child[name]}
    return merged
