"""A reproduction or a study refuses to start from a working tree with uncommitted changes: its
cells would log a commit (`git.commit`) whose code is not the code they ran, and the pages count
such cells (`git.dirty`) as a caveat. `--allow-dirty` starts anyway; HARNESS_ALLOW_DIRTY=1 does the
same for a whole session (the test suite sets it: its runs are throwaway, its trees often dirty)."""

from __future__ import annotations

import os

from harness.errors import UserError
from harness.machine.git_state import uncommitted

ALLOW_ENV = "HARNESS_ALLOW_DIRTY"


def refuse_dirty(allow: bool, what: str) -> None:
    """Raise one sentence when the tree has uncommitted changes and nothing allows it."""
    if allow or os.environ.get(ALLOW_ENV, "").strip() not in ("", "0"):
        return
    changed = uncommitted()
    if not changed:   # clean, or not a git checkout (nothing to record either way)
        return
    shown = ", ".join(line[3:] for line in changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    raise UserError(f"{what} refuses to start from a working tree with uncommitted changes ({shown}): its runs "
                    "would record a commit whose code is not what they ran. Commit or stash the changes, or pass "
                    "--allow-dirty (the report then counts those cells as run from uncommitted code).")
