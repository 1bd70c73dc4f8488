"""What this process may use of the machine it runs on: its cores (the affinity mask, not the
machine's count), its CUDA GPUs (as CUDA_VISIBLE_DEVICES names them), and whether a device is here
(missing_gpu). What a device name means is device_names.py's, apart from this module so that a
config reads it with no torch import within reach. Imports nothing else of the harness, so the
training half, the launchers and the command line all ask here; torch is imported only when GPUs are
counted, so asking for cores stays cheap.

A sweep worker given a slice of the GPUs (distributed/placement.worker_gpu_env) finds the slice's
description in SLICE_ENV, and every "not enough GPUs here" reason ends with it (`slice_note`)."""

from __future__ import annotations

import os

from harness.machine.device_names import parse_device

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
# Set with a worker's slice so a skip reason can say why this process sees so few GPUs.
SLICE_ENV = "HARNESS_GPU_SLICE"


def usable_cores() -> list[int]:
    """The cores this process may run on, in order (the affinity mask, not the machine's count)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def usable_core_count() -> int:
    return len(usable_cores())


def gpu_count() -> int:
    """The CUDA GPUs this process sees (its slice, in a sweep worker); 0 without a usable CUDA.
    Counting does not create a CUDA context."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES names them (indices, UUIDs or
    MIG ids, kept as given), else 0 .. device_count-1."""
    listed = os.environ.get(VISIBLE_ENV)
    if listed is not None:
        return [name.strip() for name in listed.split(",") if name.strip()]
    return [str(i) for i in range(gpu_count())]


def missing_gpu(device: str) -> str | None:
    """What this machine lacks for `device`, as the end of a sentence ("this machine has no usable
    CUDA GPU", "this machine has 2 GPU(s)"), or None when it is here (always for the CPU). `device`
    must be a valid name (parse_device)."""
    kind, index = parse_device(device)
    if kind != "cuda":
        return None
    have = gpu_count()
    if have == 0:
        return "this machine has no usable CUDA GPU"
    if index is not None and index >= have:
        return f"this machine has {have} GPU(s)"
    return None


def slice_note() -> str:
    """' (worker 2 of 2 sees GPU(s) 1 of 0,1; ...)' inside a worker given a slice, else ''."""
    note = os.environ.get(SLICE_ENV)
    return f" ({note}; fewer --workers give each worker more)" if note else ""
