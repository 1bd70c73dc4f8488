"""What a measurement was taken on: code version, software and hardware. Logged as tags on every
run so a result can be traced and results from different machines are never silently merged."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict[str, str]:
    """Tags describing this process's code, software and machine (cached: it does not change)."""
    commit = _git("rev-parse", "HEAD") or "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    flags = cpu_flags()
    tags = {
        "git.commit": commit,
        "git.dirty": "unknown" if status is None else str(bool(status)).lower(),
        "python.version": platform.python_version(),
        "torch.version": torch.__version__,
        "torch.cuda": torch.version.cuda or "none",
        "cpu.model": cpu_model(),
        "cpu.cores": str(os.cpu_count()),
        "cpu.native_bf16": str(bool(flags & {"avx512_bf16", "amx_bf16"})).lower(),
        "gpu.names": ", ".join(gpus) or "none",
        "host": socket.gethostname(),
    }
    # Same machine and software => same id; the report splits tables by it.
    identity = "|".join(tags[k] for k in ("torch.version", "torch.cuda", "cpu.model", "cpu.cores", "gpu.names"))
    tags["fingerprint"] = hashlib.sha1(identity.encode()).hexdigest()[:10]
    return tags


def machine_text(tags: dict[str, str]) -> str:
    """One line naming the machine and software in fingerprint tags (a run's, or this process's)."""
    return (f"{tags.get('cpu.model')}, {tags.get('cpu.cores')} cores, GPUs: {tags.get('gpu.names')}, "
            f"torch {tags.get('torch.version')}")
