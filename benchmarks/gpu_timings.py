"""The GPU timings behind tests/test_gpu.py, printed as seconds and ratios (`make gpu-check` runs it
after the GPU tests); the tests assert the same behaviour without a clock, since a time on a shared
machine is no pass or fail.

    .venv/bin/python benchmarks/gpu_timings.py

1. A batch copy from a pinned buffer (harness/training/data.py DeviceBatches) returns while the GPU is busy;
   a copy from fresh pageable memory waits until the GPU is free.
2. The clock over two GPUs (harness/training/timing.py timed) waits for work on the second; a clock over the
   first alone does not (two GPUs or more).

Exit 0 whatever the ratios (without a GPU it says so and exits 0); 1 when a measurement fails.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
BUSY_S = 0.5   # how long the GPU is kept busy under each measured call


def keep_busy(device: torch.device, seconds: float) -> None:
    """Queue a kernel that spins for about `seconds` on `device`, and return at once."""
    with torch.cuda.device(device):
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.cuda._sleep(10_000_000)
        torch.cuda.synchronize()
        cycles_per_s = 10_000_000 / (time.perf_counter() - start)
        torch.cuda._sleep(int(seconds * cycles_per_s))


def pinned_and_pageable_copy_s(device: torch.device) -> tuple[float, float]:
    """Seconds until a pinned and a pageable batch copy return, each queued behind BUSY_S of work."""
    from harness.training.data import DeviceBatches, synthetic

    split = synthetic((3, 32, 32), 256, 8, seed=0).train
    to_device, idx = DeviceBatches(device), torch.arange(64)
    for _ in range(DeviceBatches.SLOTS):  # both buffers allocated outside the measurement
        to_device(split, idx)
    torch.cuda.synchronize(device)
    keep_busy(device, BUSY_S)
    start = time.perf_counter()
    to_device(split, idx)
    pinned_s = time.perf_counter() - start
    torch.cuda.synchronize(device)
    keep_busy(device, BUSY_S)
    start = time.perf_counter()
    split.x[idx].to(device, non_blocking=True)  # what the loop did before: a fresh pageable tensor
    pageable_s = time.perf_counter() - start
    torch.cuda.synchronize(device)
    return pinned_s, pageable_s


def clock_over_first_and_both_s(first: torch.device, second: torch.device) -> tuple[float, float]:
    """What `timed` reads around BUSY_S of work on `second`: over `first` alone, and over both."""
    from harness.training.timing import timed

    with timed(first) as first_only:
        keep_busy(second, BUSY_S)
    torch.cuda.synchronize(second)
    with timed(first, second) as both:
        keep_busy(second, BUSY_S)
    return first_only.seconds, both.seconds


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu timings: no CUDA GPU here; nothing to time")
        return 0
    first = torch.device("cuda", 0)
    pinned_s, pageable_s = pinned_and_pageable_copy_s(first)
    print(f"gpu timings: batch copy behind {BUSY_S:.1f} s of GPU work: pinned returned in {pinned_s * 1e3:.1f} ms, "
          f"pageable in {pageable_s * 1e3:.1f} ms ({pageable_s / max(pinned_s, 1e-9):.0f}x; pinned should not wait)")
    if torch.cuda.device_count() < 2:
        print(f"gpu timings: the clock over two GPUs needs 2; this machine has {torch.cuda.device_count()}")
        return 0
    first_only_s, both_s = clock_over_first_and_both_s(first, torch.device("cuda", 1))
    print(f"gpu timings: {BUSY_S:.1f} s of work on GPU 1 timed over GPU 0 alone: {first_only_s:.3f} s, over both: "
          f"{both_s:.3f} s (the clock over both should see it all)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(main())
