"""`--scale last`, what `make` passes when SCALE is not given: the scale this sweep or study last ran
at in this checkout, else the smallest (smoke), said in one line on stdout.

A newcomer's `make sweep-sparsity SCALE=smoke` followed by the README's `make study-lr-batch
ARGS=--status` or `make report-sparsity` used to mean the full scale, which had not run. Each sweep
and study writes its scale into a small JSON file under mlruns/ (git-ignored) once its checks have
passed and its store is open; reading it costs a file read, where asking MLflow costs seconds."""

from __future__ import annotations

import json
import os
import time

from harness import folders
from harness.specs.specfile import LAST_SCALE as LAST   # the --scale value that asks for the last run's scale
SMALLEST = "smoke"             # every sweep and study file has it
STATE_NAME = "last-scales.json"


def state_path():
    return folders.STATE_DIR / STATE_NAME


def read_all() -> dict[str, dict]:
    """Every recorded run, by "sweep:NAME" or "study:NAME"; {} when none is (or the file is unreadable)."""
    try:
        found = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def record(kind: str, name: str, scale: str) -> None:
    """Remember that `kind` `name` ran at `scale` now. Written whole (a temporary file renamed into
    place) so two commands never leave half a file; a folder that takes no file is no reason to stop
    the run it describes, so a failed write is passed over."""
    state = read_all()
    state[f"{kind}:{name}"] = {"scale": scale, "at": time.strftime("%Y-%m-%d %H:%M")}
    path = state_path()
    temporary = path.with_name(f".{STATE_NAME}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)


def choose(kind: str, name: str, scales, *, fallback: str | None = SMALLEST, say=print) -> str | None:
    """The scale `--scale last` stands for, said in one line: the recorded one where the file still
    has it, else `fallback` (the smallest; None: the caller's own default, which `say` is told)."""
    found = read_all().get(f"{kind}:{name}", {})
    if found.get("scale") in scales:
        say(f"harness: {kind} {name}: scale {found['scale']}, the scale it last ran at here ({found.get('at')}); "
            "SCALE= (--scale) picks another.")
        return found["scale"]
    if fallback is None:
        say(f"harness: {kind} {name}: no run of it recorded here, so the scale of its latest run in the store; "
            "SCALE= (--scale) picks another.")
        return None
    say(f"harness: {kind} {name}: scale {fallback}, the smallest, since it has not run here yet; "
        "SCALE= (--scale) picks another.")
    return fallback
