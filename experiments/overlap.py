"""Timing and copying helpers that D12.3 and its exercises share (experiments/autoparallel*.py).

- `timed_on` / `median_time`: wall time from a synchronized start to a synchronize of every device
  used, the first call a warm-up outside the clock;
- `hidden_share`: how much of the work that could overlap did: 0 = serial, 1 = as fast as the longest part;
- `host_copies`: where results copied to the host land, the same memory for a baseline and the run
  it is compared with (unless the d2l mix is asked for);
- `products_copied_meanwhile`: products on the compute stream, each copied on a second stream as
  soon as it is ready.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from harness.training.timing import spread

# (index, product) -> host tensor
Copy = Callable[[int, torch.Tensor], torch.Tensor]


def timed_on(fn: Callable[[], object], devices: list[torch.device]) -> float:
    for d in devices:
        torch.cuda.synchronize(d)
    start = time.perf_counter()
    fn()
    for d in devices:
        torch.cuda.synchronize(d)
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], devices: list[torch.device], repeats: int) -> float:
    timed_on(fn, devices)  # warm-up: cuBLAS handles, the allocator, first touch of host pages
    return spread([timed_on(fn, devices) for _ in range(repeats)])["median"]


def products(x: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """d2l's run(x): `steps` products of x with itself, queued on the current stream."""
    return [x.mm(x) for _ in range(steps)]


def hidden_share(parts: list[float], together: float) -> float:
    """(sum of parts - time together) / (sum of parts - longest part): 0 when the parts ran one after
    the other, 1 when together took no longer than the longest; above 1 something else changed
    (d2l's compute-and-copy run also copied into faster, pinned memory)."""
    saving_possible = sum(parts) - max(parts)
    return (sum(parts) - together) / saving_possible if saving_possible > 0 else float("nan")


def host_copies(memory: str, n: int, count: int) -> tuple[Copy, Copy]:
    """(baseline copy, overlapped copy) of an n x n product to the host.

    pageable / pinned: both into the same preallocated buffers (pinned: page-locked), the baseline
    blocking, the overlapped one non_blocking, so a comparison of the two measures overlap alone.
    pageable_then_pinned: d2l's copy_to_cpu as printed, a new tensor each time: `y.to('cpu')` for the
    baseline (pageable) and `y.to('cpu', non_blocking=True)` for the overlapped run, whose result torch
    allocates in pinned memory; the gain then includes the faster copy into pinned memory."""
    if memory == "pageable_then_pinned":
        return (lambda i, y: y.to("cpu")), (lambda i, y: y.to("cpu", non_blocking=True))
    buffers = [torch.empty(n, n, pin_memory=memory == "pinned") for _ in range(count)]
    return (lambda i, y: buffers[i].copy_(y)), (lambda i, y: buffers[i].copy_(y, non_blocking=True))


def products_copied_meanwhile(x: torch.Tensor, steps: int, copy: Copy, copier: torch.cuda.Stream) -> None:
    """`steps` products of x on the current stream; each is copied on `copier` once it is ready, and
    the next product is queued before that copy is issued, so the copy into pageable memory (which
    holds the host until it is done) still runs beside the next product."""
    compute = torch.cuda.current_stream(x.device)
    pending: tuple[int, torch.Tensor, torch.cuda.Event] | None = None

    def issue(i: int, y: torch.Tensor, ready: torch.cuda.Event) -> None:
        with torch.cuda.stream(copier):
            copier.wait_event(ready)
            copy(i, y)
            y.record_stream(copier)  # the allocator must not reuse y before the copier is done with it

    for i in range(steps):
        y = x.mm(x)
        ready = torch.cuda.Event()
        ready.record(compute)
        if pending is not None:
            issue(*pending)
        pending = (i, y, ready)
    if pending is not None:
        issue(*pending)
    copier.synchronize()
