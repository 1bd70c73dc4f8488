"""What a target function running on a rank is given: who it is, its device, a heartbeat for the
parent's hang watchdog, and collectives that degrade to no-ops in a single process, so the same
training code runs with world_size 1 in-process and with N ranks under torchrun."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

HEARTBEAT_EVERY_S = 1.0
# Test-only fault injection, read on the ranks (a monkeypatch cannot reach another process):
#   crash:R (rank R exits at its first step), hang:R (rank R sleeps at its first step),
#   delay:R:S (rank R sleeps S seconds inside the clock at the end of training).
FAULT_ENV = "HARNESS_TEST_FAULT"


@dataclass
class RankContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    heartbeat_file: Path | None = None
    _last_beat: float = 0.0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_initialized()

    def beat(self) -> None:
        """Tell the parent this rank is making progress (throttled to one file touch a second)."""
        now = time.monotonic()
        if self.heartbeat_file is not None and now - self._last_beat >= HEARTBEAT_EVERY_S:
            self.heartbeat_file.touch()
            self._last_beat = now

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def gather(self, value):
        """Every rank's `value`, in rank order, on every rank."""
        if not self.distributed:
            return [value]
        out = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def broadcast(self, value, src: int = 0):
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def fault(self, point: str) -> None:
        """Test hook: do the fault named in HARNESS_TEST_FAULT if it is for this rank and this point."""
        spec = os.environ.get(FAULT_ENV, "")
        if not spec:
            return
        kind, _, rest = spec.partition(":")
        rank, _, seconds = rest.partition(":")
        if int(rank or -1) != self.rank:
            return
        if point == "first_step" and kind == "crash":
            os._exit(3)
        if point == "first_step" and kind == "hang":
            while True:
                time.sleep(60)
        if point == "end_of_training" and kind == "delay":
            time.sleep(float(seconds))
