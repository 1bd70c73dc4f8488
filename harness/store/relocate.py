"""A SQLite store whose folder has moved: a clone of the repository at another path, a results folder
copied to another machine. MLflow writes every experiment's artifact location, and every run's
artifact URI, as an absolute file: URI when it creates them, so a store opened from its new folder
would still read and write artifacts at the old one (where a report's plots, a cell's config.json and
a resumed sweep's new runs would go, or fail to go).

The harness lays a SQLite store out as `<folder>/mlflow.db` with `<folder>/artifacts/<experiment>/`
(harness/store/tracking.py). An experiment whose location is `<elsewhere>/artifacts/<name>` is taken as
moved with the store, and pointed at `<folder>/artifacts/<name>` with its runs, unless its old folder
is still there and the new one is not: that location was chosen deliberately and is kept."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlsplit


def follow_moved_folder(db: Path, artifact_root: Path) -> int:
    """Point the experiments (and their runs) of the SQLite store `db` that were made in another
    folder at `artifact_root`; how many experiments moved. A store with nothing to move is only read."""
    here = artifact_root.resolve().as_uri()
    with contextlib.closing(sqlite3.connect(db, timeout=120)) as connection:
        moves = [(eid, old, f"{here}/{old.rsplit('/', 1)[1]}")
                 for eid, old in connection.execute("SELECT experiment_id, artifact_location FROM experiments")
                 if _moved(old, here, artifact_root)]
        if not moves:
            return 0
        with connection:   # one transaction: a store is never left half moved
            for eid, old, new in moves:
                connection.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (new, eid))
                connection.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                                   "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                                   (new, len(old) + 1, eid, len(old) + 1, f"{old}/"))
    return len(moves)


def _moved(location: str | None, here: str, artifact_root: Path) -> bool:
    if not location or not location.startswith("file:"):
        return False   # a server's or a cloud bucket's location does not move with a folder
    parent, _, name = location.rstrip("/").rpartition("/")
    if parent == here or not parent.endswith("/artifacts") or not name:
        return False
    old_folder = Path(unquote(urlsplit(location).path))
    return not (old_folder.is_dir() and not (artifact_root / name).is_dir())
