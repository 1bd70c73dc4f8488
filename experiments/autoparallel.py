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


import torch

from experiments import autoparallel_exercises as exercises
from experiments.descriptors.autoparallel import AutoparallelConfig
from experiments.overlap import hidden_share, host_copies, median_time, products, products_copied_meanwhile
from harness.errors import CellSkipped
from harness.machine.hardware import gpu_count, slice_note
from harness.training.train import EpochCallback

GPUS_NEEDED = {"two_devices": 2, "compute_copy": 1, "small_ops": 1, "cpu_gpu": 1, "dependencies": 1}


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
