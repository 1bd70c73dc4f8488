"""Can this cell run here, and where does each rank go?

Checked in the parent before anything is launched, so a cell that cannot run (backend not built
into this torch, oneCCL bindings missing, too few GPUs or cores) is a recorded skip with its
reason, never a crash of the sweep.

Placement: on CPU, local rank r gets cores r*t .. r*t+t-1 of the cores this process may use
(`os.sched_setaffinity`) and t intra-op threads (`OMP_NUM_THREADS`, `torch.set_num_threads`); on
GPUs, local rank r gets `cuda:r` of the GPUs this process sees.

Several sweep workers on one machine: `worker_gpu_env` gives each worker its own disjoint slice of
the GPUs through `CUDA_VISIBLE_DEVICES`, so workers never run cells on the same GPU at once; a cell
needing more GPUs than its worker's slice is then an ordinary skip (the counts above see the slice),
and its reason names the slice.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.distributed as dist

from harness.machine import hardware
from harness.fields.config import RunConfig
from harness.distributed import slurm_span
from harness.errors import CellSkipped
from harness.machine.hardware import SLICE_ENV, VISIBLE_ENV, slice_note

CCL_MODULE = "oneccl_bindings_for_pytorch"


def ranks_per_node(cfg: RunConfig) -> int:
    return cfg.world_size // cfg.nnodes


def threads_per_rank(cfg: RunConfig, cores: int | None = None, ranks: int | None = None) -> int:
    """cfg.threads, or (threads=0) this node's cores shared evenly among its ranks (`ranks` when the
    cell runs fewer processes than world_size, see launch)."""
    cores = hardware.usable_core_count() if cores is None else cores
    return cfg.threads or max(1, cores // (ranks or ranks_per_node(cfg)))


def rank_cores(local_rank: int, threads: int, cores: list[int] | None = None) -> list[int]:
    cores = hardware.usable_cores() if cores is None else cores
    return cores[local_rank * threads:(local_rank + 1) * threads]


def worker_gpu_slices(workers: int, visible: list[str]) -> list[list[str]]:
    """Disjoint GPU slices, one per worker. Every worker gets the same number, len(visible) //
    workers, so whether a cell fits does not depend on which worker claims it (GPUs left over are
    idle). With more workers than GPUs the first workers get one GPU each and the rest none: their
    CUDA cells are skips that say so (gpu_workers_problem lets a launcher refuse that instead)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers > len(visible):
        return [visible[i:i + 1] for i in range(workers)]
    size = len(visible) // workers
    return [visible[i * size:(i + 1) * size] for i in range(workers)]


def worker_gpu_env(index: int, workers: int, visible: list[str] | None = None) -> dict[str, str]:
    """The environment worker `index` (0-based) of `workers` should get: its slice of the GPUs as
    CUDA_VISIBLE_DEVICES (an empty value hides every GPU), and a note for skip reasons. `visible`
    defaults to what this process sees. Empty when there are no GPUs or a single worker (nothing
    to split)."""
    if not 0 <= index < workers:
        raise ValueError(f"worker index {index} is not in 0 .. {workers - 1}")
    visible = hardware.visible_gpus() if visible is None else visible
    if not visible or workers == 1:
        return {}
    mine = worker_gpu_slices(workers, visible)[index]
    return {VISIBLE_ENV: ",".join(mine),
            SLICE_ENV: f"worker {index + 1} of {workers} sees GPU(s) {','.join(mine) or 'none'} of {','.join(visible)}"}


def gpu_workers_problem(workers: int, visible: list[str] | None = None) -> str | None:
    """Why `workers` workers cannot each get a GPU of their own here, or None: for a launcher that
    prefers refusing CUDA cells with too many workers to recording some of them as skips."""
    visible = hardware.visible_gpus() if visible is None else visible
    if workers > 1 and workers > len(visible):
        return (f"--workers {workers} for CUDA cells needs {workers} GPUs (one slice each, so no two workers "
                f"time cells on the same GPU); this machine has {len(visible)}: use --workers {max(len(visible), 1)}")
    return None


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
    elif device_type == "cpu" and cfg.backend != "gloo":
        # One process has no collective to run: this cell would time the backend=gloo cell again.
        raise CellSkipped(f"one process uses no torch.distributed backend, so backend={cfg.backend} at "
                          "world_size 1 would be the backend=gloo cell again (that cell is the baseline)")
    if slurm_span.nodes_needed(cfg) > 1:
        return  # Slurm places it on nodes that hold it (slurm_span), not on this one
    local = ranks_per_node(cfg)
    if device_type == "cuda":
        missing = hardware.missing_gpu(device_type)  # by type: each rank takes cuda:<its local rank>
        if missing:
            raise CellSkipped(f"device '{cfg.device}' was asked for but {missing}" + slice_note())
        have = hardware.gpu_count()
        if distributed and have < local:
            raise CellSkipped(f"{local} ranks on this node need {local} GPUs (one each); this machine has {have}"
                              + slice_note())
        if distributed and cfg.backend == "gloo":
            raise CellSkipped("backend 'gloo' on GPUs would allreduce the gradients through host memory, not "
                              "GPU to GPU, so the time would not be DDP's on GPUs; set backend=nccl (make "
                              "sweep-NAME DEVICE=cuda sets it)")
        return
    cores = hardware.usable_core_count()
    threads = threads_per_rank(cfg, cores)
    if local * threads > cores:
        shape = f"{local} rank(s) x {threads} thread(s)" if distributed else f"{threads} threads"
        raise CellSkipped(f"{shape} need {local * threads} cores with one thread per core; "
                          f"this process may use {cores}")

