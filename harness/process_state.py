"""What a process carries from one trial to the next, read without changing it: torch's thread
counts, the OS threads alive, the graphs torch.compile has compiled here, and whether the
floating-point unit flushes denormal numbers to zero.

Flushing is read from an operation's result, not from a setting: `torch.set_flush_denormal`
reports nothing back, and the x86 MXCSR flags it sets (FTZ/DAZ) belong to each thread. A denormal
float times 1.0 stays itself unless the thread flushes (DAZ reads it as zero, FTZ writes zero); the
one-element product runs on the calling thread, the large one is split over torch's intra-op pool.
"""

from __future__ import annotations

import os
import sys

DENORMAL = 1e-39          # below float32's smallest normal number (1.18e-38), above its smallest denormal
POOL_ELEMENTS = 1 << 20   # large enough for torch to split an elementwise product over its threads


def flushes_denormals(elements: int = 1) -> float:
    """The share of `elements` denormal float32s that a multiply by 1.0 turned into zero: 0.0 on a
    thread that keeps denormals, 1.0 where every thread flushes them, between where some do."""
    import torch

    x = torch.full((elements,), DENORMAL, dtype=torch.float32)
    return float((x * 1.0 == 0).float().mean())


def compiled_graphs() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process; 0 if it was never imported (it is
    not imported here: that alone would change the process)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0


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
            "state_flush_denormal_pool": flushes_denormals(POOL_ELEMENTS)}
