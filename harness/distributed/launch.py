"""The parent side: run one cell as torchrun processes and return what the ranks wrote.

    torchrun --standalone --nproc-per-node N ...                  (one node)
    torchrun --nnodes M --node-rank R --rdzv-endpoint host:port   (several nodes)
    srun --ntasks M ... torchrun ...                              (too big for a Slurm node: slurm_span, slurm_task)

Logging stays in the calling (sweep) process, so a distributed cell is one MLflow child run like
any other. The ranks touch heartbeat files while they make progress; when any rank has been silent
for `cfg.dist_timeout_s` (hung, or waiting on a peer that died) or torchrun exits with an error,
every process of the cell (torchrun and its ranks, which run in sessions of their own) is killed and
the cell fails with a one-line reason. Nothing is left running, even on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from harness.machine import hardware
from harness.fields.config import CLASS_ENV, RunConfig, class_name
from harness.distributed import slurm_span
from harness.distributed.placement import ranks_per_node, threads_per_rank
from harness.folders import REPO_ROOT

POLL_S = 0.2
KILL_GRACE_S = 5.0


class LaunchFailed(RuntimeError):
    """A rank crashed, hung or never started; `workdir` holds the launcher log and rank errors."""

    def __init__(self, message: str, workdir: Path):
        super().__init__(message)
        self.workdir = workdir


def torchrun_command(cfg: RunConfig, config_path: Path, workdir: Path, target: str,
                     is_host: bool | None = None, processes: int | None = None) -> list[str]:
    """`is_host`: whether this node hosts the rendezvous (default: the node whose name is the
    endpoint's; two nodes of one machine, as Slurm tasks may be, must be told). `processes`: ranks
    on this node, when not the config's (see `launch`)."""
    command = [sys.executable, "-m", "torch.distributed.run"]
    if cfg.nnodes == 1:
        command += ["--standalone", "--nnodes=1"]
    else:
        host = "" if is_host is None else f",is_host={int(is_host)}"
        command += [f"--nnodes={cfg.nnodes}", f"--node-rank={cfg.node_rank}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={cfg.rdzv_endpoint}", f"--rdzv-id=harness-{_job_id(cfg)}",
                    f"--rdzv-conf=join_timeout={int(cfg.dist_timeout_s)}{host}"]
    command += [f"--nproc-per-node={processes or ranks_per_node(cfg)}", "--max-restarts=0",
                "-m", "harness.distributed.worker", str(config_path), str(workdir), target]
    return command


def _job_id(cfg: RunConfig) -> str:
    """The same on every node of one cell: the cell's id with this node's rank left out."""
    return cfg.model_copy(update={"node_rank": 0}).cell_id()


def launch(cfg: RunConfig, target: str, *, keep_workdir: bool = False, processes: int | None = None) -> dict:
    """Run `target` ("module:function") on cfg.world_size ranks; return the dict they return.
    `processes` overrides the number of ranks on this node: 1 runs a single-process cell (one that
    drives several GPUs itself, or one GPU) away from the sweep process, so no CUDA context or
    cached GPU memory stays behind in the sweep for a later cell's rank 0 to share."""
    local = processes or ranks_per_node(cfg)
    span = slurm_span.from_env()
    nodes = slurm_span.nodes_needed(cfg, span)
    if nodes > 1:  # every node reads the config and writes its heartbeats and result in a shared folder
        Path(span.shared_dir).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="harness-ddp-", dir=span.shared_dir if nodes > 1 else None))
    config_path = workdir / "config.json"
    config_path.write_text(cfg.model_dump_json())
    env = _rank_environment(cfg, local)
    log_path = workdir / "launcher.log"
    started = time.time()
    if nodes > 1:
        command, env = slurm_span.srun_command(cfg, span, nodes, config_path, workdir, target), slurm_span.srun_env(env)
    else:
        command = torchrun_command(cfg, config_path, workdir, target, processes=local)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    tree = _Tree(proc.pid)
    failed = True
    try:
        while proc.poll() is None:
            tree.refresh()
            if nodes > 1:  # the job may wait in the queue: the ranks' clock starts when it runs
                silent = _silence(workdir, cfg.world_size, slurm_span.started(workdir) or time.time())
            else:
                silent = _silence(workdir, local, started)
            if silent > cfg.dist_timeout_s:
                raise LaunchFailed(f"a rank made no progress for {silent:.0f} s (dist_timeout_s="
                                   f"{cfg.dist_timeout_s:g}): hung or waiting for a dead peer; all "
                                   f"{len(tree.procs)} processes of the cell were killed", workdir)
            time.sleep(POLL_S)
        result_path = workdir / f"result-node{cfg.node_rank}.json"
        if proc.returncode != 0 or not result_path.exists():
            raise LaunchFailed(f"torchrun exited with status {proc.returncode}: {_why(workdir)}", workdir)
        failed = False
        return json.loads(result_path.read_text())
    finally:
        tree.kill()
        proc.wait(timeout=KILL_GRACE_S)  # reap torchrun: no zombie either
        if not (keep_workdir or failed):
            shutil.rmtree(workdir, ignore_errors=True)


def _rank_environment(cfg: RunConfig, local: int) -> dict[str, str]:
    """The environment the ranks start in: this checkout importable, their share of the usable cores."""
    cores = hardware.usable_cores()
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": str(threads_per_rank(cfg, len(cores), local)),
            "HARNESS_CORES": json.dumps(cores),
            CLASS_ENV: class_name(cfg),  # the ranks read config.json back as this class
            "PYTHONUNBUFFERED": "1"}


def _silence(workdir: Path, local_ranks: int, started: float) -> float:
    """Seconds since the least recent sign of life of this node's ranks (start time until a rank beats)."""
    beats = [p.stat().st_mtime for p in workdir.glob("beat-rank*")]
    beats += [started] * max(0, local_ranks - len(beats))
    return time.time() - min(beats)


def _why(workdir: Path) -> str:
    """The last line of the first rank's traceback, else the launcher's most telling line."""
    for error in sorted(workdir.glob("error-rank*.txt")):
        lines = [line for line in error.read_text().splitlines() if line.strip()]
        if lines:
            return f"{error.stem.removeprefix('error-')}: {lines[-1]}"
    log = (workdir / "launcher.log").read_text(errors="replace").splitlines()
    telling = [line for line in log if "exitcode" in line or "Error" in line or "error" in line]
    return (telling or log or ["no output"])[-1].strip() + f" (log: {workdir / 'launcher.log'})"


class _Tree:
    """torchrun and every process below it. Ranks are started in new sessions, so a process-group
    kill would miss them: they are collected by ancestry while alive and killed one by one."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.procs: dict[int, psutil.Process] = {pid: self.root}

    def refresh(self) -> None:
        try:
            for child in self.root.children(recursive=True):
                self.procs.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def kill(self) -> None:
        self.refresh()
        alive = [p for p in self.procs.values() if _alive(p)]
        for p in alive:
            _signal(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(alive, timeout=KILL_GRACE_S)
        for p in alive:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=KILL_GRACE_S)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.NoSuchProcess:
        pass
