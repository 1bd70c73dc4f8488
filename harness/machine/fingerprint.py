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

from harness.machine.git_state import git, uncommitted
from harness.machine.hardware import gpu_count

FINGERPRINT = "fingerprint"   # the tag (and key) naming one machine: ratios are formed only within one


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_fields(text: str) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo text ("model name", "cpu family", ...)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break   # the first processor's block is enough: the others are the same chip
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_identity(text: str) -> dict[str, str]:
    """What tells two CPUs apart beyond their marketing name: family, model and stepping (one
    "AMD EPYC" name covers several generations) and a hash of the feature flags (a hypervisor may
    hide AVX-512 from one guest and not another)."""
    fields = cpu_fields(text)
    flags = " ".join(sorted(fields.get("flags", fields.get("Features", "")).split()))
    return {
        "cpu.family": fields.get("cpu family", "unknown"),
        "cpu.model_id": fields.get("model", "unknown"),
        "cpu.stepping": fields.get("stepping", "unknown"),
        "cpu.flags_hash": hashlib.sha1(flags.encode()).hexdigest()[:10] if flags else "unknown",
    }


def cpu_model() -> str:
    name = cpu_fields(_cpuinfo()).get("model name")
    return name or platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    fields = cpu_fields(_cpuinfo())
    return set(fields.get("flags", "").split())


def gpu_identity() -> dict[str, str]:
    """Each GPU's compute capability, and the driver version (nvidia-smi's, when it is there)."""
    count = gpu_count()
    if count == 0:
        return {"gpu.capability": "none", "gpu.driver": "none"}
    capability = ", ".join("%d.%d" % torch.cuda.get_device_capability(i) for i in range(count))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        driver = out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        driver = "unknown"
    return {"gpu.capability": capability, "gpu.driver": driver}


# What makes two setups different machines (the fingerprint hashes these tags).
IDENTITY = ("torch.version", "torch.cuda", "cpu.model", "cpu.cores", "cpu.family", "cpu.model_id", "cpu.stepping",
            "cpu.flags_hash", "gpu.names", "gpu.capability", "gpu.driver")


def fingerprint_of(tags: dict[str, str]) -> str:
    """Same machine and software => same id; the report splits tables by it."""
    return hashlib.sha1("|".join(tags.get(k, "unknown") for k in IDENTITY).encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict[str, str]:
    """Tags describing this process's code, software and machine (cached: it does not change)."""
    commit = git("rev-parse", "HEAD") or "unknown"
    status = uncommitted()
    gpus = [torch.cuda.get_device_name(i) for i in range(gpu_count())]
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
        **cpu_identity(_cpuinfo()),
        **gpu_identity(),
        "host": socket.gethostname(),
    }
    tags[FINGERPRINT] = fingerprint_of(tags)
    return tags


def machine_text(tags: dict[str, str]) -> str:
    """One line naming the machine and software in fingerprint tags (a run's, or this process's)."""
    chip = (f" (family {tags['cpu.family']} model {tags.get('cpu.model_id')} stepping {tags.get('cpu.stepping')})"
            if tags.get("cpu.family", "unknown") != "unknown" else "")
    return (f"{tags.get('cpu.model')}{chip}, {tags.get('cpu.cores')} cores, GPUs: {tags.get('gpu.names')}, "
            f"torch {tags.get('torch.version')}")
