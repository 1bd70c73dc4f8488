"""Can this cell run here, and where does each rank go?

Checked in the parent before anything is launched, so a cell that cannot run (backend not built
into this torch, oneCCL bindings missing, too few GPUs or cores) is a recorded skip with its
reason, never a crash of the sweep.

Placement: on CPU, local rank r gets cores r*t .. r*t+t-1 of the cores this process may use
(`os.sched_setaffinity`) and t intra-op threads (`OMP_NUM_THREADS`, `torch.set_num_threads`); on
GPUs, local rank r gets `cuda:r`.
"""

from __future__ import annotations

import importlib.util
import os

import torch
import torch.distributed as dist

from harness.config import RunConfig
from harness.distributed import slurm_span
from harness.errors import CellSkipped

CCL_MODULE = "oneccl_bindings_for_pytorch"


def usable_cores() -> list[int]:
    """The cores this process may run on, in order (the affinity mask, not the machine's count)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def ranks_per_node(cfg: RunConfig) -> int:
    return cfg.world_size // cfg.nnodes


def threads_per_rank(cfg: RunConfig, cores: int | None = None) -> int:
    """cfg.threads, or (threads=0) this node's cores shared evenly among its ranks."""
    cores = len(usable_cores()) if cores is None else cores
    return cfg.threads or max(1, cores // ranks_per_node(cfg))


def rank_cores(local_rank: int, threads: int, cores: list[int] | None = None) -> list[int]:
    cores = usable_cores() if cores is None else cores
    return cores[local_rank * threads:(local_rank + 1) * threads]


def backend_problem(backend: str) -> str | None:
    """Why `backend` cannot be used with this torch build, or None when it can."""
    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if backend == "gloo" and not dist.is_gloo_available():
        return "backend 'gloo' is not built into this torch (torch.distributed.is_gloo_available() is False)"
    if backend == "nccl" and not dist.is_nccl_available():
        return "backend 'nccl' is not built into this torch (a CPU-only build; NCCL needs a CUDA build and GPUs)"
    if backend == "mpi" and not dist.is_mpi_available():
        return ("backend 'mpi' is not built into this torch (torch.distributed.is_mpi_available() is False; "
                "the PyPI wheels do not include MPI, it needs torch built from source against an MPI)")
    if backend == "ccl" and importlib.util.find_spec(CCL_MODULE) is None:
        return (f"backend 'ccl' needs Intel's oneCCL bindings ({CCL_MODULE}), which are not installed; they "
                f"are not on PyPI and their last wheels cover torch 2.5-2.8 (this is torch {torch.__version__})")
    return None


def check_can_run(cfg: RunConfig) -> None:
    """Raise CellSkipped with the reason when this machine cannot run the cell as configured."""
    device_type = cfg.device.partition(":")[0]
    distributed = cfg.world_size > 1 or cfg.nnodes > 1
    if distributed:
        problem = backend_problem(cfg.backend)
        if problem:
            raise CellSkipped(problem)
        if cfg.backend == "nccl" and device_type != "cuda":
            raise CellSkipped("backend 'nccl' runs on GPUs only; use backend=gloo (or ccl) with device=cpu")
    if slurm_span.nodes_needed(cfg) > 1:
        return  # Slurm places it on nodes that hold it (slurm_span), not on this one
    local = ranks_per_node(cfg)
    if device_type == "cuda":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have == 0:
            raise CellSkipped(f"device '{cfg.device}' was asked for but this machine has no usable CUDA GPU")
        if distributed and have < local:
            raise CellSkipped(f"{local} ranks on this node need {local} GPUs (one each); this machine has {have}")
        return
    cores = len(usable_cores())
    threads = threads_per_rank(cfg, cores)
    if local * threads > cores:
        shape = f"{local} rank(s) x {threads} thread(s)" if distributed else f"{threads} threads"
        raise CellSkipped(f"{shape} need {local * threads} cores with one thread per core; "
                          f"this process may use {cores}")


def worker_gpu_env(index: int, workers: int, visible: list[str] | None = None) -> dict[str, str]:
    """Placeholder until the GPU-slicing work lands: no GPU environment for workers."""
    return {}
