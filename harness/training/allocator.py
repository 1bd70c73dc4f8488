"""How glibc's malloc treats freed memory in the process that trains a cell (the `malloc` field).

By default glibc serves a block above its mmap threshold with a fresh mmap and unmaps it when it is
freed, and it returns free memory at the top of the heap to the kernel (trimming). A training step
frees and allocates the same large tensors every step, so their pages may be faulted in again every
step (in a virtual machine each fault may also be a fault on the host):

    glibc_default   glibc as it starts: what a plain `python train.py` gets (the default)
    keep_freed      mallopt(M_MMAP_MAX, 0) and trimming off, when the cell starts: every later block
                    comes from the heap and a freed one is reused, never returned (mallopt(3))

What it does to this machine's noise is measured, not assumed (`make bench-noise ARGS="--variants
harness,keep-freed,keep-freed-env"`; docs/MEASUREMENT.md has the figures): in three interleaved runs
keeping freed memory lowered the spread of the A/A ratio in 3 of 4 comparisons, by less than the
spread moved between runs, and a 20-round run gave 9.4% against 11.8%, inside the host's own drift.
So it is a method to try, not the default.

The setting lasts for the rest of the process, so glibc_default cannot follow keep_freed in one
process: such a cell is a skip with that reason (run it in a sweep of its own). A process started
with glibc's variables keeps freed memory whatever the field says; each cell records what was in
effect (`malloc_keeps_freed`). On a C library that is not glibc neither option exists: keep_freed
is recorded as not in effect, and the cell runs with that library's own allocator.
"""

from __future__ import annotations

import ctypes
import os
import platform

from harness.errors import CellSkipped

KEEP_FREED = "keep_freed"   # the `malloc` field's other value is "glibc_default": nothing to apply
METRIC = "malloc_keeps_freed"   # 1: freed memory is kept in this process, 0: returned as glibc does

# glibc's <malloc.h> option numbers
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1   # mallopt takes an int: the largest, about 2 GiB, is "never" for a training step
_ENVIRONMENT = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")   # glibc reads them when the process starts

_kept_here = False   # keep_freed was applied in this process


def glibc() -> bool:
    return platform.libc_ver()[0] == "glibc"


def keeps_freed() -> bool:
    """Whether this process keeps freed memory: applied here, or started with glibc's variables set."""
    return glibc() and (_kept_here or any(name in os.environ for name in _ENVIRONMENT))


def keep_freed() -> None:
    """Keep freed memory in this process from now on (mallopt). A no-op where the C library is not glibc."""
    global _kept_here
    if not glibc():
        return
    libc = ctypes.CDLL(None)
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)):
        raise CellSkipped("glibc refused the malloc options that keep freed memory (mallopt returned 0)")
    _kept_here = True


def apply(mode: str) -> dict[str, float]:
    """Put this process in `mode` before a cell trains; the metric that says what is in effect."""
    if mode == KEEP_FREED:
        keep_freed()
    elif _kept_here:
        raise CellSkipped("malloc=glibc_default cannot run in a process that already keeps freed memory (an "
                          "earlier cell of this process set malloc=keep_freed): run the glibc_default cells in a "
                          "sweep of their own")
    return {METRIC: float(keeps_freed())}
