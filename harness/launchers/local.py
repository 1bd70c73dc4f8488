"""Workers as processes on this machine (`--workers K`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from harness.launchers.follow import FollowBar
from harness.signals import raise_if_stopped

GRACE_S = 3       # after a Ctrl-C, the most the workers get to close their runs by themselves
KILL_AFTER_S = 30
POLL_S = 1.0      # how often the bar reads the shared database


PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends a process when its parent dies


def end_with_parent(parent_pid: int) -> None:
    """In a worker, between fork and exec: ask the kernel for SIGTERM when the launcher dies (a
    SIGKILL gives it no chance to stop its workers), so no orphan goes on loading the machine. The
    worker takes SIGTERM as an interrupt and closes its run. Linux only; elsewhere a no-op."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the launcher died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def _wait_a_while(proc: subprocess.Popen, seconds: float) -> None:
    """Up to `seconds`, less when `proc` ends first: the launcher sees its last worker end at once,
    not at its next poll."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


class LocalLauncher:
    detach = False

    def cores_per_worker(self, workers: int) -> int:
        from harness.machine.hardware import usable_core_count

        return max(1, usable_core_count() // workers)  # K workers on one machine share its cores

    def run(self, commands: list[list[str]], envs: list[dict[str, str]], progress=None) -> list[int]:
        launcher = os.getpid()
        procs = [subprocess.Popen(command, env={**os.environ, **env}, preexec_fn=lambda: end_with_parent(launcher))
                 for command, env in zip(commands, envs)]
        bar = FollowBar(progress)
        try:
            while running := [p for p in procs if p.poll() is None]:
                raise_if_stopped()   # a stop whose KeyboardInterrupt a finalizer swallowed (harness/signals.py)
                bar.update(f"{len(running)} workers running")
                _wait_a_while(running[0], POLL_S)
            return [p.wait() for p in procs]
        except KeyboardInterrupt:
            # A Ctrl-C at the terminal reached the workers too (same process group); give them a
            # moment to close their runs, then pass it on to any that did not get it (the
            # launcher alone was signalled, by SIGTERM say).
            deadline = time.monotonic() + GRACE_S
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.05)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            deadline = time.time() + KILL_AFTER_S
            for p in procs:
                try:
                    p.wait(timeout=max(1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
            raise
        finally:
            bar.close()
