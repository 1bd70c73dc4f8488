"""A fork server: a fresh interpreter that has imported torch, the harness and the experiments and
run nothing else, which forks one child per job. Each job then starts in the same clean process
state (threads, floating-point flags, allocator, caches) at the cost of a fork, not of an
interpreter's imports.

The server must never run a torch operation itself: a fork after torch's thread pools started
copies their bookkeeping without their threads, and would carry the state over that it exists to
keep out. It imports only; the child sets its threads and runs the job.

Protocol: the caller writes one JSON line per job to the server's stdin, `{"target": "module:function",
"payload": ...}`; replies come as JSON lines on the file descriptor given by `--reply-fd` (stdout
and stderr stay the caller's, for the job's own output). The server answers `{"ready": ...}` once
at start, `{"started": pid}` per job, then hands both pipes to the child: the job function gets a
`Channel` to send messages and read the caller's answers. When the child has exited the server
writes `{"exit": code}` (negative: killed by that signal). One job at a time: while a child runs,
the server only waits for it. End of stdin ends the server.

Who dies with whom: the server with the process that started it, a child with the server
(PR_SET_PDEATHSIG: SIGKILL for the server, SIGTERM for a child, which its job may turn into a
clean stop), so no training is left running when a study worker is killed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

PR_SET_PDEATHSIG = 1
READY_TIMEOUT_S = 300    # imports on a loaded 2-core machine can take a minute


def die_with_parent(sig: int, parent: int) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux; elsewhere a no-op),
    and exit now if the parent is already gone (it may have died before the request was made)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (AttributeError, OSError):
        return
    if os.getppid() != parent:
        os._exit(1)


def threads_now() -> int:
    """OS threads in this process (a started torch pool adds some)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


class Channel:
    """Line-delimited JSON over a pair of file descriptors (unbuffered reads: a pipe shared between
    a server and its child must never have bytes sitting in one side's buffer)."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self._pending = b""

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.write_fd, data):]

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None at end of file."""
        while b"\n" not in self._pending:
            chunk = os.read(self.read_fd, 1)   # one byte at a time: never read past this line
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)


def _run_child(job: dict[str, Any], channel: Channel, server: int) -> None:
    """In the forked child: run the job's function, then leave without the server's exit handlers."""
    code = 0
    try:
        die_with_parent(signal.SIGTERM, server)
        signal.signal(signal.SIGINT, signal.default_int_handler)   # the server ignores Ctrl-C; a job must not
        module, _, name = job["target"].partition(":")
        getattr(importlib.import_module(module), name)(job.get("payload"), channel)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # the job reports its own errors; this is for one that could not
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(reply_fd: int, preload: list[str], parent: int) -> None:
    die_with_parent(signal.SIGKILL, parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is for the job and the caller; the server waits
    started = time.perf_counter()
    for module in preload:
        importlib.import_module(module)
    channel = Channel(sys.stdin.fileno(), reply_fd)
    channel.send({"ready": {"pid": os.getpid(), "import_s": time.perf_counter() - started,
                            "threads": threads_now()}})
    while True:
        job = channel.receive()
        if job is None:
            return
        pid = os.fork()
        if pid == 0:
            _run_child(job, channel, os.getppid())
        channel.send({"started": pid})
        _, status = os.waitpid(pid, 0)
        channel.send({"exit": os.waitstatus_to_exitcode(status)})


class ForkServer:
    """The caller's side: start the server (it imports while the caller goes on), then `job()` per
    job. Use as a context manager, or call close()."""

    def __init__(self, preload: list[str], env: dict[str, str] | None = None):
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.launchers.forkserver", "--reply-fd", str(write_fd),
             "--parent", str(os.getpid()), *[a for m in preload for a in ("--preload", m)]],
            stdin=subprocess.PIPE, pass_fds=(write_fd,), env={**os.environ, **(env or {})})
        os.close(write_fd)
        self.channel = Channel(read_fd, self.proc.stdin.fileno())
        self.ready: dict[str, Any] | None = None
        self.child: int | None = None

    def wait_ready(self) -> dict[str, Any]:
        if self.ready is None:
            message = self.channel.receive()
            if message is None or "ready" not in message:
                code = self.proc.wait(timeout=READY_TIMEOUT_S)
                raise RuntimeError(f"the fork server exited before it was ready (exit code {code})")
            self.ready = message["ready"]
        return self.ready

    def start(self, target: str, payload: Any) -> int:
        """Send a job; returns the child's pid. Then read its messages with `channel.receive()`
        until one has "exit"."""
        self.wait_ready()
        self.channel.send({"target": target, "payload": payload})
        message = self.channel.receive()
        if message is None or "started" not in message:
            raise RuntimeError("the fork server died before it started the job")
        self.child = message["started"]
        return self.child

    def stop_child(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the running child and read messages until the server reports its exit."""
        if self.child is None:
            return None
        try:
            os.kill(self.child, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            message = self.channel.receive()
            if message is None:
                break
            if "exit" in message:
                self.child = None
                return message["exit"]
        try:
            os.kill(self.child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.child = None
        return None

    def close(self) -> None:
        if self.child is not None:
            self.stop_child()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.channel.read_fd)

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="fork server (started by harness.launchers.forkserver.ForkServer)")
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--preload", action="append", default=[])
    args = parser.parse_args()
    serve(args.reply_fd, args.preload, args.parent)


if __name__ == "__main__":
    main()
