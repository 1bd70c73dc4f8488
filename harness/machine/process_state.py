"""What a process carries from one trial to the next, read without changing it: torch's thread
counts, the OS threads alive, the graphs torch.compile has compiled here, whether the
floating-point unit flushes denormal numbers to zero, and whether glibc's allocator still hands
memory back to the kernel.

The allocator: glibc serves a request of at least its mmap threshold (128 KiB at start) with a
fresh mapping and unmaps it on free, so a training step's large tensors fault their pages in again
every step. Freeing such a mapping raises the threshold to its size (up to 32 MiB; glibc's malloc.c,
"dynamic mmap threshold") and the trim threshold to twice that, and from then on blocks below it
come from the heap, which keeps freed memory. So an earlier trial that freed large tensors changes
how many page faults the next one takes a step, and its speed (benchmarks/trial_leak.py measures
it). The probe runs in a forked child, so reading it does not change the process it reads: there,
an 8 MiB block is allocated, written and freed twice, and the second time's page faults counted.
Where the threshold is still below 8 MiB the first free raises it, the second block grows the heap
and each of its pages faults once (1.0); where an earlier free already raised it above 8 MiB, the
second block reuses the first one's pages (0.0).

Flushing is read from an operation's result, not from a setting: `torch.set_flush_denormal`
reports nothing back, and the x86 MXCSR flags it sets (FTZ/DAZ) belong to each thread. A denormal
float times 1.0 stays itself unless the thread flushes (DAZ reads it as zero, FTZ writes zero); the
one-element product runs on the calling thread, the large one is split over torch's intra-op pool.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
PROBE_BYTES = 8 << 20     # above the fresh threshold (128 KiB), below the largest dynamic one (32 MiB)
DENORMAL = 1e-39          # below float32's smallest normal number (1.18e-38), above its smallest denormal
POOL_ELEMENTS = 1 << 20   # large enough for torch to split an elementwise product over its threads
_BUFFERS: dict = {}       # elements -> (input, product, is-zero), allocated once


def flushes_denormals(elements: int = 1) -> float:
    """The share of `elements` denormal float32s that a multiply by 1.0 turned into zero: 0.0 on a
    thread that keeps denormals, 1.0 where every thread flushes them, between where some do."""
    import torch

    if elements not in _BUFFERS:   # kept for the process's life: freeing a mapping would move the allocator's threshold
        _BUFFERS[elements] = (torch.empty(elements, dtype=torch.float32), torch.empty(elements, dtype=torch.float32),
                              torch.empty(elements, dtype=torch.bool))
    x, product, zero = _BUFFERS[elements]
    x.fill_(DENORMAL)
    torch.mul(x, 1.0, out=product)
    torch.eq(product, 0, out=zero)
    return int(torch.count_nonzero(zero)) / elements   # a sum would free an int64 copy


def compiled_graphs() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process; 0 if it was never imported (it is
    not imported here: that alone would change the process)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0


def allocator_returns_memory() -> float:
    """The share of an 8 MiB block's pages that faulted on its second allocation in a forked child:
    1.0 where glibc's mmap threshold is below 8 MiB (as in a fresh process), near 0.0 where an earlier
    free raised it and freed memory is reused. NaN where this cannot be read (not glibc, not Linux)."""
    try:
        libc = ctypes.CDLL(None)
        malloc, free, memset = libc.malloc, libc.free, libc.memset
        malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        free.argtypes = [ctypes.c_void_p]
        memset.restype, memset.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        libc.gnu_get_libc_version   # glibc only: another allocator's thresholds are not these
    except (AttributeError, OSError):
        return float("nan")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:     # the child: touch nothing but libc, report, and leave without Python's exit
        try:
            block = malloc(PROBE_BYTES)
            memset(block, 1, PROBE_BYTES)
            free(block)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            block = malloc(PROBE_BYTES)
            memset(block, 1, PROBE_BYTES)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            free(block)
            os.write(write_fd, str(min(faults * PAGE / PROBE_BYTES, 1.0)).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        reply = os.read(read_fd, 64)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    return float(reply) if reply else float("nan")


def os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:   # not Linux
        return 0


def snapshot() -> dict[str, float]:
    """The process state a trial could leave behind, as metrics (numbers only)."""
    import torch

    return {"state_threads": float(torch.get_num_threads()),
            "state_interop_threads": float(torch.get_num_interop_threads()),
            "state_os_threads": float(os_threads()),
            "state_compiled_graphs": float(compiled_graphs()),
            "state_flush_denormal": flushes_denormals(1),
            "state_flush_denormal_pool": flushes_denormals(POOL_ELEMENTS),
            "state_allocator_returns_memory": allocator_returns_memory()}
