"""D12.3 (d2l 12.3): automatic parallelism across devices and between compute and copies.

- autopar_case=two_devices: `run(x)` (autopar_steps products of autopar_size-square matrices) on
  GPU 0 alone, on GPU 1 alone, then on both queued without a synchronize between them; if the
  devices work in parallel, both together take about as long as the slower one alone.
- autopar_case=compute_copy: the products on GPU 0, then copying every result to the host, against
  copying each result with non_blocking=True into pinned memory as soon as it is computed, on a
  second stream, overlapping the copies with the remaining compute.

Needs GPUs (two for two_devices, one for compute_copy): on a CPU-only machine the cell is a
recorded skip, since a CPU has no queue that runs ahead of Python for this to show.

    harness run autoparallel --set device=cuda --set autopar_case=compute_copy
"""

from __future__ import annotations

import torch

from experiments import Experiment
from harness.config import RunConfig
from harness.distributed.placement import slice_note
from harness.errors import CellSkipped
from harness.timing import spread
from harness.train import EpochCallback


def _products(x: torch.Tensor, steps: int) -> list[torch.Tensor]:
    return [x.mm(x) for _ in range(steps)]


def _timed(fn, devices: list[torch.device]) -> float:
    import time

    for d in devices:
        torch.cuda.synchronize(d)
    start = time.perf_counter()
    fn()
    for d in devices:
        torch.cuda.synchronize(d)
    return time.perf_counter() - start


def _repeat(cfg: RunConfig, fn, devices: list[torch.device]) -> float:
    _timed(fn, devices)  # warm-up: cuBLAS handles, allocator
    return spread([_timed(fn, devices) for _ in range(cfg.epochs)])["median"]


def run(cfg: RunConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    need = 2 if cfg.autopar_case == "two_devices" else 1
    if not cfg.device.startswith("cuda") or have < need:
        raise CellSkipped(f"D12.3 {cfg.autopar_case} needs {need} GPU(s) and device=cuda; this machine has "
                          f"{have} usable GPU(s) (device={cfg.device}); on a CPU there is no device queue "
                          "that runs ahead of Python, so there is nothing to overlap" + slice_note())
    torch.manual_seed(cfg.seed)
    n, steps = cfg.autopar_size, cfg.autopar_steps
    if cfg.autopar_case == "two_devices":
        g0, g1 = torch.device("cuda", 0), torch.device("cuda", 1)
        x0, x1 = torch.randn(n, n, device=g0), torch.randn(n, n, device=g1)
        alone0 = _repeat(cfg, lambda: _products(x0, steps), [g0])
        alone1 = _repeat(cfg, lambda: _products(x1, steps), [g1])
        both = _repeat(cfg, lambda: (_products(x0, steps), _products(x1, steps)), [g0, g1])
        return {"gpu0_time_s": alone0, "gpu1_time_s": alone1, "both_time_s": both,
                "train_time_s": both, "overlap_gain": (alone0 + alone1) / both}
    g0 = torch.device("cuda", 0)
    x = torch.randn(n, n, device=g0)
    compute = _repeat(cfg, lambda: _products(x, steps), [g0])
    results = _products(x, steps)
    copy = _repeat(cfg, lambda: [y.to("cpu") for y in results], [g0])
    pinned = [torch.empty(n, n, pin_memory=True) for _ in range(steps)]
    copier = torch.cuda.Stream(g0)

    def overlapped():
        compute_stream = torch.cuda.current_stream(g0)
        for i in range(steps):
            y = x.mm(x)
            done = torch.cuda.Event()
            done.record(compute_stream)
            with torch.cuda.stream(copier):
                copier.wait_event(done)
                pinned[i].copy_(y, non_blocking=True)
                y.record_stream(copier)
        copier.synchronize()

    both = _repeat(cfg, overlapped, [g0])
    return {"compute_time_s": compute, "copy_time_s": copy, "compute_then_copy_s": compute + copy,
            "overlapped_time_s": both, "train_time_s": both, "overlap_gain": (compute + copy) / both}


EXPERIMENT = Experiment(
    name="autoparallel",
    title="D12.3: two GPUs queued without synchronizing; compute overlapped with copies to the host",
    run=run,
    clock=("each figure is wall time from a synchronized start to a synchronize of every device used; "
           "the first call of each kind is a warm-up outside the clock; median of `epochs` repeats"),
    needs_dataset=False,  # multiplies its own random matrices
    metrics=("gpu0_time_s", "gpu1_time_s", "both_time_s", "compute_time_s", "copy_time_s", "compute_then_copy_s",
             "overlapped_time_s", "train_time_s", "overlap_gain"),
    reads=frozenset({"device", "autopar_case", "seed", "autopar_size", "autopar_steps", "epochs"}),
    # needs a GPU: a recorded skip (CellSkipped) on a machine without one
    smoke={"device": "cuda", "autopar_case": "compute_copy", "autopar_size": 256, "autopar_steps": 4, "epochs": 2},
)
