"""D12.2 (d2l 12.2): how much of an unsynchronized GPU time is only work being queued?

d2l's benchmark: ten times `a = random normal 1000x1000; b = a @ a`, in numpy, then in torch on the
device, the clock read without and then with `torch.cuda.synchronize()`. On a GPU the kernels are
queued and the call returns at once, so the unsynchronized time is mostly launch time. A CPU device
is synchronous: each call returns after its work is done, and the two readings agree up to noise.

    harness run async --set device=cpu --set timing_repeats=3

Each repeat reads the clock twice around the same torch work: once right after the last call
returns (no sync: what a naive timer sees) and once after synchronizing the device (the real time).
`nosync_share` is the first over the second (median over the repeats): about 1 on a CPU, which
queues nothing, and the report says so.

async_pause_s is the notes' exercise: `time.sleep(5)` between the numpy and the torch benchmark
made torch's CPU time drop from 0.2859 s to 0.2103 s, which the notes read as numpy still using
the device when torch's clock started. Each repeat sleeps that long between the two.
The report's `speedup` is torch's time straight after numpy over its time after the pause.

Sized to the device: on a recent GPU a 1000x1000 round takes about as long on the device as its
two calls take to return, so the unsynchronized clock would see half the time from launch cost
alone, not because nothing was queued. On a GPU matrix_size is therefore a lower bound: it is
doubled until one round's device time is at least ROUND_OVER_LAUNCH times its calls' return time,
and the side used is logged as `matrix_size_used` (numpy multiplies the same size). A CPU runs
the size as given: it queues nothing, so there is nothing to size.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from experiments.descriptors.asynchronous import AsyncConfig
from harness.training.timing import spread, synchronize
from harness.training.train import EpochCallback, prepare

__all__ = ["AsyncConfig", "run"]


ROUND_OVER_LAUNCH = 10.0   # a round's device time, at least this many times its calls' return time
MAX_MATRIX_SIZE = 16384    # 1 GiB per fp32 matrix: the growth stops here whatever the ratio


def numpy_round(n: int, iterations: int, rng: np.random.Generator) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        a = rng.normal(size=(n, n))
        a @ a
    return time.perf_counter() - start


def torch_round(n: int, iterations: int, device: torch.device) -> tuple[float, float]:
    """(seconds when the last call returned, seconds once the device finished)."""
    synchronize(device)  # nothing queued from before is inside this clock
    start = time.perf_counter()
    for _ in range(iterations):
        a = torch.randn(n, n, device=device)
        torch.mm(a, a)
    returned = time.perf_counter() - start
    synchronize(device)
    return returned, time.perf_counter() - start


def sized_to_device(n: int, device: torch.device,
                    measure: Callable[[int], tuple[float, float]] | None = None) -> int:
    """The matrix side to use: `n` on a CPU; on a GPU `n` doubled until a round's device time is at
    least ROUND_OVER_LAUNCH times the time its calls take to return (MAX_MATRIX_SIZE at most).
    `measure(n) -> (returned, finished)` times one round (torch_round by default; tests pass theirs)."""
    if device.type != "cuda":
        return n
    measure = measure or (lambda size: _fastest_round(size, device))
    while n < MAX_MATRIX_SIZE:
        returned, finished = measure(n)
        if finished >= ROUND_OVER_LAUNCH * returned:
            break
        n = min(2 * n, MAX_MATRIX_SIZE)
    return n


def _fastest_round(n: int, device: torch.device, tries: int = 3) -> tuple[float, float]:
    """The least return time and least device time of a few single rounds (the first at a new size
    also pays for its allocation)."""
    rounds = [torch_round(n, 1, device) for _ in range(tries)]
    return min(r for r, _ in rounds), min(f for _, f in rounds)


def run(cfg: AsyncConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    device = prepare(cfg)
    torch_round(cfg.matrix_size, 1, device)  # warm-up before sizing: allocator, kernels, BLAS threads
    n, k = sized_to_device(cfg.matrix_size, device), cfg.matmul_iterations
    rng = np.random.default_rng(cfg.seed)
    torch_round(n, 1, device)  # warm-up: allocator, kernel selection, BLAS thread pool
    numpy_round(n, 1, rng)
    numpy_times, nosync, synced = [], [], []
    for _ in range(cfg.timing_repeats):
        numpy_times.append(numpy_round(n, k, rng))
        if cfg.async_pause_s:
            time.sleep(cfg.async_pause_s)  # outside both clocks
        returned, finished = torch_round(n, k, device)
        nosync.append(returned)
        synced.append(finished)
    np_t, ns_t, s_t = spread(numpy_times), spread(nosync), spread(synced)
    return {
        "numpy_time_s": np_t["median"],
        "numpy_time_iqr_s": np_t["iqr"],
        "torch_nosync_time_s": ns_t["median"],
        "torch_nosync_time_iqr_s": ns_t["iqr"],
        "torch_sync_time_s": s_t["median"],
        "torch_sync_time_iqr_s": s_t["iqr"],
        # Share of the real time a naive (unsynchronized) clock sees: about 1 on a synchronous device.
        "nosync_share": float(np.median([a / b for a, b in zip(nosync, synced)])),
        "numpy_over_torch": np_t["median"] / s_t["median"],
        "matrix_size_used": float(n),
        **numpy_blas_threads(),
    }


def numpy_blas_threads() -> dict[str, float]:
    """The threads numpy's own BLAS may use, as threadpoolctl (a dependency of scikit-learn) reads it
    from the libraries numpy loaded: torch against numpy is a fair fight only when both use the same
    cores, and `threads` sets torch's alone. Empty when numpy's BLAS is not found (not logged)."""
    from threadpoolctl import threadpool_info

    found = [lib["num_threads"] for lib in threadpool_info()
             if lib.get("user_api") == "blas" and "numpy" in lib.get("filepath", "")]
    return {"numpy_blas_threads": float(max(found))} if found else {}
