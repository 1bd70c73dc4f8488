"""A cell with more ranks than one Slurm node holds runs as one Slurm job across nodes.

In a worker of `--launcher slurm`, the launcher leaves in SPAN_ENV what a node of the partition
holds (CPUs, GPUs) and a folder every node sees. A distributed cell that does not fit one node
(and was not placed on nodes by hand with `nnodes`) is spread over the fewest nodes that hold it
evenly, and `launch` starts it as

    srun --ntasks M --cpus-per-task C [--gpus-per-task G] python -m harness.distributed.slurm_task CONFIG WORKDIR TARGET

a new job of M tasks, one per node; each task (slurm_task, its own module: it needs `launch`, which
needs this one) runs torchrun as node SLURM_PROCID of M, with the c10d rendezvous hosted on the
job's first node. The ranks write their heartbeats and result to WORKDIR in the shared folder, so
the cell's result comes back to the worker as from one node. Slurm chooses the nodes: a task asks
for a whole node's worth of CPUs or GPUs, so each lands on its own node (on a small test cluster,
two tasks may share one).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.fields.config import RunConfig

SPAN_ENV = "HARNESS_SLURM_SPAN"
PORT_BASE = 29400  # the rendezvous port is PORT_BASE + job id % 1000: two cells on one first node differ


@dataclass(frozen=True)
class Span:
    """What a worker may ask of Slurm for a cell: a node's CPUs and GPUs, the partition, the time
    limit (minutes) and the folder every node sees."""
    node_cpus: int
    node_gpus: int
    partition: str | None
    time_min: int
    shared_dir: str

    def encode(self) -> str:
        return json.dumps(self.__dict__)


def from_env() -> Span | None:
    text = os.environ.get(SPAN_ENV)
    return Span(**json.loads(text)) if text else None


def nodes_needed(cfg: RunConfig, span: Span | None = None) -> int:
    """How many nodes the cell is spread over: 1 when it fits one node, when it is not run by a
    Slurm worker, or when it was placed on nodes by hand (nnodes > 1)."""
    span = span or from_env()
    if span is None or cfg.world_size == 1 or cfg.nnodes > 1:
        return 1
    holds = span.node_gpus if cfg.device.startswith("cuda") else span.node_cpus // max(1, cfg.threads)
    if holds < 1 or cfg.world_size <= holds:
        return 1  # fits, or no node can hold even one rank: placement says why
    return next(m for m in range(2, cfg.world_size + 1) if cfg.world_size % m == 0 and cfg.world_size // m <= holds)


def srun_command(cfg: RunConfig, span: Span, nodes: int, config_path: Path, workdir: Path, target: str) -> list[str]:
    """One Slurm job of `nodes` tasks, each asking for what its share of the ranks needs."""
    per_node = cfg.world_size // nodes
    cpus = span.node_cpus if cfg.threads == 0 else min(span.node_cpus, per_node * cfg.threads)
    command = ["srun", f"--job-name=harness-cell-{cfg.cell_id()[:8]}", f"--ntasks={nodes}", f"--cpus-per-task={cpus}",
               "--kill-on-bad-exit=1", "--unbuffered"]
    if cfg.device.startswith("cuda"):
        command.append(f"--gpus-per-task={per_node}")
    if span.partition:
        command.append(f"--partition={span.partition}")
    command.append(f"--time={span.time_min}")
    return command + [sys.executable, "-m", "harness.distributed.slurm_task", str(config_path), str(workdir), target]


def srun_env(env: dict[str, str]) -> dict[str, str]:
    """The environment for srun from inside a worker's job: without the job's SLURM_* variables,
    srun asks for a new job instead of a step of the worker's one-node job."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def started(workdir: Path) -> float | None:
    """When the first task of the cell's job started (None while the job waits in the queue)."""
    marks = [p.stat().st_mtime for p in workdir.glob("started-node*")]
    return min(marks) if marks else None
