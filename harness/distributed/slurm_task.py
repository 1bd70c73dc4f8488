"""One task of a cell's multi-node Slurm job, the command `slurm_span.srun_command` starts on each node:

    python -m harness.distributed.slurm_task CONFIG WORKDIR TARGET

It runs torchrun as node SLURM_PROCID of SLURM_NTASKS, with the c10d rendezvous hosted on the job's
first node, and marks in WORKDIR when it started. Kept apart from slurm_span (what a worker asks of
Slurm), because it needs the launcher's torchrun command and the launcher needs slurm_span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.machine import hardware
from harness.fields.config import read_config_file
from harness.distributed.launch import torchrun_command
from harness.distributed.placement import threads_per_rank
from harness.distributed.slurm_span import PORT_BASE


def first_host(nodelist: str) -> str:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def main(argv: list[str]) -> int:
    """One task of the cell's job: torchrun as node SLURM_PROCID of SLURM_NTASKS."""
    if len(argv) != 3:
        print("usage: python -m harness.distributed.slurm_task CONFIG WORKDIR TARGET (srun starts it for a cell "
              "spread over Slurm nodes)", file=sys.stderr)
        return 2
    config_path, workdir, target = Path(argv[0]), Path(argv[1]), argv[2]
    cfg = read_config_file(config_path)   # as the experiment's class, named by the launcher
    node, nodes = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    endpoint = f"{first_host(os.environ['SLURM_JOB_NODELIST'])}:{PORT_BASE + int(os.environ['SLURM_JOB_ID']) % 1000}"
    node_cfg = cfg.model_copy(update={"nnodes": nodes, "node_rank": node, "rdzv_endpoint": endpoint})
    node_config = workdir / f"config-node{node}.json"
    node_config.write_text(node_cfg.model_dump_json())
    (workdir / f"started-node{node}").touch()
    cores = hardware.usable_cores()  # this node's, not the worker's
    env = {**os.environ, "HARNESS_CORES": json.dumps(cores),
           "OMP_NUM_THREADS": str(threads_per_rank(node_cfg, len(cores)))}
    command = torchrun_command(node_cfg, node_config, workdir, target, is_host=node == 0)
    os.execve(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
