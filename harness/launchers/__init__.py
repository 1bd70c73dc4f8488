"""Who starts the worker processes of a sweep or a study. The engines only say how many workers
they want and which command line each runs; a launcher starts them and follows them:
`LocalLauncher` as processes on this machine, `SlurmLauncher` as one Slurm job array. Workers
coordinate through the shared database alone, so the same worker command joins in from any machine
that reaches that database and the tracking store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Protocol

from harness.launchers.local import LocalLauncher

__all__ = ["Launcher", "LocalLauncher", "Progress", "WorkerRole", "worker_command"]

# (done, total): how far the workers have got, read from the shared database by the engine.
Progress = Callable[[], tuple[int, int]]


@dataclass(frozen=True)
class WorkerRole:
    """What a launcher tells one of its workers: its index, the invocation's claims token (workers
    of one invocation try a failing cell once between them), the parent run to log under, and
    whether the workers close that parent run themselves (the launcher detached and is gone)."""
    index: int
    token: str
    parent_run_id: str
    closes_parent: bool = False

    def encode(self) -> str:
        return f"{self.index}:{self.token}:{self.parent_run_id}:{'close' if self.closes_parent else ''}"

    @classmethod
    def decode(cls, text: str | None) -> "WorkerRole | None":
        if not text:
            return None
        index, token, parent, closes = (text.split(":") + ["", "", ""])[:4]
        return cls(int(index), token, parent, closes == "close")


class Launcher(Protocol):
    detach: bool  # True: run() submits the workers and returns None at once; they close the parent run

    def cores_per_worker(self, workers: int) -> int:
        """The cores each worker may use (the engines give each worker that many torch threads)."""

    def run(self, commands: list[list[str]], envs: list[dict[str, str]],
            progress: Progress | None = None) -> list[int] | None:
        """Start one worker per command (with its extra environment), follow them (a bar of
        `progress()` when given), return their exit codes; None when detached. Ctrl-C stops the
        workers, which close their runs before exiting, and is raised again."""


def worker_command(harness_args: list[str], role: WorkerRole) -> list[str]:
    """The command line of one worker: the same `harness` command, as one worker of the invocation."""
    return [sys.executable, "-m", "harness", *harness_args, "--workers", "1", "--no-progress",
            "--worker", role.encode()]
