"""D12.3 (d2l 12.3): automatic parallelism across devices and between compute and copies, and the
section's exercises 2, 3 and 5 (experiments/autoparallel_exercises.py).

- autopar_case=two_devices: `run(x)` (autopar_steps products of autopar_size-square matrices) on
  GPU 0 alone, on GPU 1 alone, then on both queued without a synchronize between them; if the
  devices work in parallel, both together take about as long as the slower one alone.
- autopar_case=compute_copy: the products on GPU 0, then copying every result to the host, against
  the products and the copies queued together. The copies land in the same host memory in both
  (autopar_host_memory pageable or pinned), so `overlap_gain` measures overlap alone.
  `overlap_hidden_share` = (sum of the parts - together) / (sum - longest part): 0 serial, 1 as fast
  as the longest part alone.
  autopar_copy_stream=compute is d2l's procedure: `y = run(x)` then `copy_to_cpu(y, True)` on the
  one stream, which runs in order (the copies wait for the last product); separate copies each
  result on a second stream as soon as it is ready. d2l's own pair of runs is
  autopar_host_memory=pageable_then_pinned: its baseline copied with `y.to('cpu')` (pageable) and
  its overlapped run with `non_blocking=True`, for which torch allocates pinned memory, so its
  2.16x mixes the overlap with the faster copy into pinned memory.
- small_ops, cpu_gpu, dependencies: the exercises (see that module).

Needs GPUs (two for two_devices, one for the others): on a CPU-only machine the cell is a
recorded skip, since a CPU has no queue that runs ahead of Python for this to show.

    harness run autoparallel --set device=cuda --set autopar_case=compute_copy
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from experiments import Experiment, autoparallel_exercises as exercises
from experiments.overlap import hidden_share, host_copies, median_time, products, products_copied_meanwhile
from harness.training.config import RunConfig
from harness.errors import CellSkipped
from harness.training.field_groups import EpochsFields
from harness.machine.hardware import gpu_count, slice_note
from harness.training.train import EpochCallback

GPUS_NEEDED = {"two_devices": 2, "compute_copy": 1, "small_ops": 1, "cpu_gpu": 1, "dependencies": 1}


class AutoparallelConfig(RunConfig, EpochsFields):
    """D12.3 and its exercises; `epochs` is the number of timed repeats whose median is quoted."""

    autopar_case: Literal["two_devices", "compute_copy", "small_ops", "cpu_gpu", "dependencies"] = Field(
        "two_devices", description="D12.3: two_devices (two GPUs queued without synchronizing), compute_copy "
        "(compute overlapped with copies to the host); its exercises: small_ops (2: small products on "
        "several streams of one GPU), cpu_gpu (3: CPU compute beside GPU compute and copies), dependencies "
        "(5: two branches joined every stage, on two streams, checked against one stream).")
    autopar_size: int = Field(4000, ge=1, description="D12.3: side of the square matrices multiplied.")
    autopar_steps: int = Field(50, ge=1, description="D12.3: matrix products per run.")
    autopar_host_memory: Literal["pageable", "pinned", "pageable_then_pinned"] = Field(
        "pageable", description="D12.3: host memory the results are copied into, the same for the copy baseline "
        "and the overlapped run (pageable, or page-locked pinned); pageable_then_pinned is d2l's mix: baseline "
        "y.to('cpu'), overlapped y.to('cpu', non_blocking=True), which torch puts in pinned memory.")
    autopar_copy_stream: Literal["compute", "separate"] = Field(
        "separate", description="D12.3 compute_copy: compute = d2l, all products then all copies on the one "
        "stream; separate = each result copied on a second stream as soon as it is ready.")
    autopar_streams: int = Field(4, ge=1, description="D12.3 exercise 2: streams the small products are spread over.")
    autopar_cpu_size: int = Field(1000, ge=1, description="D12.3 exercise 3: side of the matrices the CPU "
                                  "multiplies (autopar_steps of them) beside the GPU's work.")


def two_devices(cfg: AutoparallelConfig) -> dict[str, float]:
    n, steps = cfg.autopar_size, cfg.autopar_steps
    g0, g1 = torch.device("cuda", 0), torch.device("cuda", 1)
    x0, x1 = torch.randn(n, n, device=g0), torch.randn(n, n, device=g1)
    alone0 = median_time(lambda: products(x0, steps), [g0], cfg.epochs)
    alone1 = median_time(lambda: products(x1, steps), [g1], cfg.epochs)
    both = median_time(lambda: (products(x0, steps), products(x1, steps)), [g0, g1], cfg.epochs)
    return {"gpu0_time_s": alone0, "gpu1_time_s": alone1, "both_time_s": both, "train_time_s": both,
            "overlap_gain": (alone0 + alone1) / both, "overlap_hidden_share": hidden_share([alone0, alone1], both)}


def compute_copy(cfg: AutoparallelConfig) -> dict[str, float]:
    n, steps = cfg.autopar_size, cfg.autopar_steps
    g0 = torch.device("cuda", 0)
    x = torch.randn(n, n, device=g0)
    compute = median_time(lambda: products(x, steps), [g0], cfg.epochs)
    baseline_copy, overlapped_copy = host_copies(cfg.autopar_host_memory, n, steps)
    results = products(x, steps)
    copy = median_time(lambda: [baseline_copy(i, y) for i, y in enumerate(results)], [g0], cfg.epochs)
    del results
    if cfg.autopar_copy_stream == "compute":  # d2l: y = run(x); y_cpu = copy_to_cpu(y, True)
        def together():
            return [overlapped_copy(i, y) for i, y in enumerate(products(x, steps))]
    else:
        copier = torch.cuda.Stream(g0)

        def together():
            products_copied_meanwhile(x, steps, overlapped_copy, copier)
    both = median_time(together, [g0], cfg.epochs)
    return {"compute_time_s": compute, "copy_time_s": copy, "compute_then_copy_s": compute + copy,
            "overlapped_time_s": both, "train_time_s": both, "overlap_gain": (compute + copy) / both,
            "overlap_hidden_share": hidden_share([compute, copy], both)}


CASES = {"two_devices": two_devices, "compute_copy": compute_copy, "small_ops": exercises.small_ops,
         "cpu_gpu": exercises.cpu_gpu, "dependencies": exercises.dependencies}


def run(cfg: AutoparallelConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    have = gpu_count()
    need = GPUS_NEEDED[cfg.autopar_case]
    if not cfg.device.startswith("cuda") or have < need:
        raise CellSkipped(f"D12.3 {cfg.autopar_case} needs {need} GPU(s) and device=cuda; this machine has "
                          f"{have} usable GPU(s) (device={cfg.device}); on a CPU there is no device queue "
                          "that runs ahead of Python, so there is nothing to overlap" + slice_note())
    torch.manual_seed(cfg.seed)
    return CASES[cfg.autopar_case](cfg)


EXPERIMENT = Experiment(
    name="autoparallel",
    title="D12.3: two GPUs queued without synchronizing; compute overlapped with copies to the host; exercises 2, 3, 5",
    run=run,
    clock=("each figure is wall time from a synchronized start to a synchronize of every device used; "
           "the first call of each kind is a warm-up outside the clock; median of `epochs` repeats"),
    needs_dataset=False,  # multiplies its own random matrices
    metrics=("gpu0_time_s", "gpu1_time_s", "both_time_s", "compute_time_s", "copy_time_s", "compute_then_copy_s",
             "overlapped_time_s", "train_time_s", "overlap_gain", "overlap_hidden_share", *exercises.METRICS),
    config=AutoparallelConfig,
    sense={"train_time_s": "minimize"},
    # needs a GPU: a recorded skip (CellSkipped) on a machine without one
    smoke={"device": "cuda", "autopar_case": "compute_copy", "autopar_size": 256, "autopar_steps": 4, "epochs": 2},
)
