"""The rank side: what torchrun starts on every rank.

    python -m torch.distributed.run ... -m harness.distributed.worker CONFIG.json WORKDIR module:function

Pins the rank (cores and threads, or its GPU), joins the process group with the config's backend
and timeout, runs `module:function(cfg, ctx) -> dict` (the same dict on every rank), and has each
node's local rank 0 write it to WORKDIR/result-node<N>.json for the parent. A failure is written to
WORKDIR/error-rank<R>.txt so the parent can say what went wrong.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
import traceback
from datetime import timedelta
from pathlib import Path


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when torchrun dies, so a killed launcher leaves no orphans."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not glibc Linux: the parent's process-tree kill still applies
        pass


def main(argv: list[str]) -> int:
    _die_with_parent()
    config_path, workdir, target = argv
    workdir = Path(workdir)
    rank = int(os.environ["RANK"])
    try:
        return _run(config_path, workdir, target, rank)
    except BaseException:
        (workdir / f"error-rank{rank}.txt").write_text(traceback.format_exc())
        raise


def _run(config_path: str, workdir: Path, target: str, rank: int) -> int:
    import torch
    import torch.distributed as dist

    from harness.training import allocator
    from harness.fields.config import read_config_file
    from harness.distributed import placement
    from harness.distributed.rank import RankContext

    cfg = read_config_file(Path(config_path))
    allocator.apply(cfg.malloc)   # each rank is a process of its own: the same allocator as a one-process cell
    local_rank = int(os.environ["LOCAL_RANK"])
    ctx = RankContext(rank=rank, world_size=int(os.environ["WORLD_SIZE"]), local_rank=local_rank,
                      node_rank=cfg.node_rank, heartbeat_file=workdir / f"beat-rank{rank}")
    ctx.heartbeat_file.touch()

    if cfg.device.startswith("cuda"):
        ctx.device = torch.device("cuda", local_rank)
        torch.cuda.set_device(ctx.device)
    else:
        threads = int(os.environ["OMP_NUM_THREADS"])
        os.sched_setaffinity(0, placement.rank_cores(local_rank, threads, json.loads(os.environ["HARNESS_CORES"])))
        torch.set_num_threads(threads)
    if cfg.backend == "ccl":
        importlib.import_module(placement.CCL_MODULE)  # registers the "ccl" backend with torch

    dist.init_process_group(cfg.backend, timeout=timedelta(seconds=cfg.dist_timeout_s),
                            device_id=ctx.device if ctx.device.type == "cuda" else None)
    try:
        module_name, _, function = target.partition(":")
        result = getattr(importlib.import_module(module_name), function)(cfg, ctx)
        if local_rank == 0:
            out = workdir / f"result-node{cfg.node_rank}.json"
            out.with_suffix(".tmp").write_text(json.dumps(result))
            out.with_suffix(".tmp").rename(out)  # the parent never reads half a file
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    if cfg.backend == "gloo":
        # Every rank has passed the barrier and the result is on disk. Tearing gloo down races: a rank
        # whose peer closed its sockets first can abort in C++ ("terminate called without an active
        # exception", exit -6), which torchrun reports as a failed cell after a good run. Leave
        # without the C++ destructors; the OS closes the sockets.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
