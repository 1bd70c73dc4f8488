"""The code a run records: this checkout's commit and whether its working tree has uncommitted
changes to tracked files (untracked files are not code a run imports unless someone adds them).
Read without torch, so a command can refuse a dirty tree before it loads anything."""

from __future__ import annotations

import subprocess

from harness.folders import REPO_ROOT


def git(*args: str) -> str | None:
    """git's output in this checkout, or None where git or the checkout is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def uncommitted() -> list[str] | None:
    """The tracked files with uncommitted changes (git status's lines), or None where git cannot say."""
    status = git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else [line for line in status.splitlines() if line.strip()]
