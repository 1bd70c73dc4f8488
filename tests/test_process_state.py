"""harness/machine/process_state.py: what a trial leaves in its process, read without changing it. The
allocator probe is checked against glibc's own behaviour in a fresh interpreter: a free of a large
mapping raises the mmap threshold (the state an earlier trial leaves), the probe sees it, and
reading it (or the flush-denormal probe's tensors) does not cause it."""

import json
import subprocess
import sys

import pytest

from harness.folders import REPO_ROOT

SCRIPT = """
import ctypes, json
from harness.machine import process_state as ps
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
seen = {"fresh": ps.allocator_returns_memory(), "read again": ps.allocator_returns_memory()}
ps.flushes_denormals(ps.POOL_ELEMENTS)
seen["after the flush probe"] = ps.allocator_returns_memory()
block = libc.malloc(30 << 20)     # what a trial's large tensor does: mapped, then unmapped on free
libc.free(block)
seen["after a 30 MiB free"] = ps.allocator_returns_memory()
print(json.dumps(seen))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator on Linux")
def test_the_allocator_probe_sees_a_raised_mmap_threshold_and_reading_it_changes_nothing():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["fresh"] > 0.9 and seen["read again"] > 0.9, seen
    assert seen["after the flush probe"] > 0.9, seen
    assert seen["after a 30 MiB free"] < 0.1, seen


def test_a_snapshot_has_the_allocator_state_beside_the_others():
    from harness.machine import process_state

    state = process_state.snapshot()
    assert {"state_threads", "state_flush_denormal_pool", "state_allocator_returns_memory"} <= set(state)
    assert 0.0 <= state["state_allocator_returns_memory"] <= 1.0
