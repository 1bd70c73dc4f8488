"""make soak ARGS="--busy-loops N" (benchmarks/soak.py): the loops spin beside the soak and are gone
after it, whatever ended it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psutil
import pytest

_spec = importlib.util.spec_from_file_location("soak_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py")
soak = sys.modules["soak_bench"] = importlib.util.module_from_spec(_spec)   # its dataclasses look it up there
_spec.loader.exec_module(soak)


def test_busy_loops_spin_during_the_soak_and_are_gone_after_it_even_when_it_fails():
    with pytest.raises(RuntimeError):
        with soak.busy_loops(2) as loops:
            spinning = [psutil.Process(loop.pid) for loop in loops]
            assert len(spinning) == 2 and all(p.is_running() for p in spinning)
            assert sum(p.cpu_percent(interval=0.5) for p in spinning) > 20   # they do take CPU
            raise RuntimeError("the soak stopped")
    assert all(loop.poll() is not None for loop in loops)
