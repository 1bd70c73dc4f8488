"""Who starts the worker processes of a sweep or a study. The engines only say how many workers
they want and which command line each runs; a launcher starts them and waits: `LocalLauncher`
as processes on this machine. Workers coordinate through the shared database alone, so the same
worker command joins in from any machine that reaches that database and the tracking store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

from harness.launchers.local import LocalLauncher

__all__ = ["Launcher", "LocalLauncher", "WorkerRole", "worker_command"]


@dataclass(frozen=True)
class WorkerRole:
    """What a launcher tells one of its workers: its index, the invocation's claims token (workers
    of one invocation try a failing cell once between them) and the parent run to log under."""
    index: int
    token: str
    parent_run_id: str

    def encode(self) -> str:
        return f"{self.index}:{self.token}:{self.parent_run_id}"

    @classmethod
    def decode(cls, text: str | None) -> "WorkerRole | None":
        if not text:
            return None
        index, token, parent = (text.split(":") + ["", ""])[:3]
        return cls(int(index), token, parent)


class Launcher(Protocol):
    def run(self, commands: list[list[str]], envs: list[dict[str, str]]) -> list[int]:
        """Start one worker per command (with its extra environment), wait for all, return their
        exit codes. Ctrl-C reaches the workers, which close their runs before exiting."""


def worker_command(harness_args: list[str], role: WorkerRole) -> list[str]:
    """The command line of one worker: the same `harness` command, as one worker of the invocation."""
    return [sys.executable, "-m", "harness", *harness_args, "--workers", "1", "--no-progress",
            "--worker", role.encode()]
