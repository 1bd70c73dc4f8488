"""Workers as one Slurm job array, submitted through submitit (`--launcher slurm --workers K`).

    harness sweep sparsity --scale quick --launcher slurm --workers 4 --slurm-partition gpu \
        --slurm-gpus-per-task 1 --slurm-cpus-per-task 8 --slurm-time 2:00:00 \
        --storage postgresql://harness:PW@dbhost/studies --tracking-uri http://dbhost:5000

Each array task runs the engine's worker command; the workers claim cells or trial slots from the
shared database and log to the tracking server, exactly as local workers do, so a job the
scheduler kills is a dead worker whose claims another takes over. This process follows the jobs
with a bar (done of total, jobs pending / running / ended) through `squeue` (a cluster without
accounting has no `sacct`, so submitit's own state watcher cannot be relied on; a squeue that does
not answer is said once, and a job whose result submitit wrote has ended), and Ctrl-C cancels
them. With `detach` it returns the job ids at once and the workers close the parent run.

Everything that would make the jobs fail on the nodes is refused before anything is submitted
(`check`): no `sbatch` here, a SQLite database or tracking store (other nodes cannot share it), a
partition Slurm does not have, more GPUs or cores per task than its nodes hold.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.distributed.slurm_span import SPAN_ENV, Span
from harness.errors import UserError, first_line
from harness.folders import MLRUNS_DIR
from harness.launchers.follow import FollowBar
from harness.store.uris import STORAGE_ENV, TRACKING_ENV, hide_passwords, is_sqlite, redact

# Where submitit writes job scripts, pickles and logs (and multi-node cells their rank files):
# the project folder, which a cluster's nodes normally share; HARNESS_SLURM_FOLDER for another.
DEFAULT_FOLDER = MLRUNS_DIR / "slurm"
POLL_S = 2.0
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "GONE"}


@dataclass(frozen=True)
class NodeShape:
    """The smallest node of a partition: what one node is sure to hold."""
    cpus: int
    gpus: int


@dataclass
class SlurmLauncher:
    partition: str | None = None
    time: str = "60"                 # sbatch --time: minutes, or [D-]HH:MM[:SS]
    gpus_per_task: int = 0
    cpus_per_task: int = 1
    detach: bool = False
    folder: Path = field(default_factory=lambda: Path(os.environ.get("HARNESS_SLURM_FOLDER", DEFAULT_FOLDER)))
    shape: NodeShape | None = None   # read by check()
    job_ids: list[str] = field(default_factory=list)

    # --- before anything is submitted ---------------------------------------------------------
    def check(self, db_url: str, tracking_uri: str) -> None:
        """One sentence (UserError) for whatever would make the jobs fail on the nodes."""
        minutes(self.time)
        if self.gpus_per_task < 0:
            raise UserError(f"--slurm-gpus-per-task must be 0 or more (got {self.gpus_per_task}).")
        if self.cpus_per_task < 1:
            raise UserError(f"--slurm-cpus-per-task must be at least 1 (got {self.cpus_per_task}).")
        if shutil.which("sbatch") is None:
            raise UserError("--launcher slurm needs Slurm's sbatch on PATH and there is none here; run on a "
                            "cluster's login node (or start a test cluster with `.ci/slurm.sh start`).")
        if is_sqlite(db_url):
            raise UserError(f"--launcher slurm needs a database every node reaches, and {redact(db_url)} is a "
                            "SQLite file other nodes cannot share: pass --storage postgresql://user:pw@host/db.")
        if is_sqlite(tracking_uri) or tracking_uri.startswith("file:") or "://" not in tracking_uri:
            raise UserError(f"--launcher slurm needs a tracking store every node reaches, and {redact(tracking_uri)} "
                            "is a local file: pass --tracking-uri http://host:5000 (an MLflow server).")
        partitions = _partitions()
        if self.partition is not None and self.partition not in partitions:
            raise UserError(f"Slurm has no partition '{self.partition}' (it has: {', '.join(partitions) or 'none'}).")
        self.shape = node_shape(self.partition)
        if self.gpus_per_task > self.shape.gpus:
            raise UserError(f"--slurm-gpus-per-task {self.gpus_per_task} is more than the {self.shape.gpus} GPU(s) a "
                            f"node of partition {self.partition or 'default'} holds.")
        if self.cpus_per_task > self.shape.cpus:
            raise UserError(f"--slurm-cpus-per-task {self.cpus_per_task} is more than the {self.shape.cpus} CPU(s) a "
                            f"node of partition {self.partition or 'default'} holds.")

    # --- the Launcher protocol ----------------------------------------------------------------
    def cores_per_worker(self, workers: int) -> int:
        return self.cpus_per_task

    def run(self, commands: list[list[str]], envs: list[dict[str, str]], progress=None) -> list[int] | None:
        import submitit

        if self.shape is None:
            self.shape = node_shape(self.partition)
        executor = submitit.SlurmExecutor(folder=self.folder / "%A")  # one folder per job array
        executor.update_parameters(**self.sbatch_parameters(commands[0]))
        # What a worker needs to spread a cell too big for one node over several (slurm_span).
        span = Span(self.shape.cpus, self.shape.gpus, self.partition, minutes(self.time), str(self.folder / "cells"))
        # Slurm gives each job its GPUs (CUDA_VISIBLE_DEVICES); a slice made for one machine would clash.
        envs = [{**{k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}, SPAN_ENV: span.encode()}
                for env in envs]
        # The store locations (a password, maybe) stay out of submitit's pickles and job scripts: sbatch
        # hands the submitting environment to the jobs (its default --export=ALL), so they go there.
        secrets = {k: v for env in envs for k, v in env.items() if k in (TRACKING_ENV, STORAGE_ENV)}
        envs = [{k: v for k, v in env.items() if k not in secrets} for env in envs]
        try:
            with _environment(secrets):
                jobs = executor.map_array(run_worker, commands, envs)
        except Exception as err:  # sbatch refused (a limit, an account): its own words
            raise UserError(f"sbatch refused the job array: {hide_passwords(first_line(err))}") from None
        self.job_ids = [job.job_id for job in jobs]
        array = self.job_ids[0].split("_")[0]
        print(f"submitted Slurm job {array} ({len(jobs)} worker job(s): {' '.join(self.job_ids)}); logs in "
              f"{self.folder / array}; `squeue -j {array}` follows it, `scancel {array}` cancels it", flush=True)
        if self.detach:
            return None
        return self._follow(jobs, array, progress)

    def sbatch_parameters(self, command: list[str]) -> dict:
        what = [a for a in command[3:5]]  # [sweep|study, path]: python -m harness sweep PATH ...
        name = "harness-" + "-".join([what[0], Path(what[1]).stem] if len(what) == 2 else ["worker"])
        # The warning signal before the time limit (USR2, see run_worker): a minute, or a quarter of a short limit.
        params = {"job_name": name, "time": minutes(self.time), "cpus_per_task": self.cpus_per_task,
                  "ntasks_per_node": 1, "signal_delay_s": min(60, minutes(self.time) * 15)}
        if self.partition:
            params["partition"] = self.partition
        if self.gpus_per_task:
            params["gpus_per_task"] = self.gpus_per_task
        return params

    # --- following ----------------------------------------------------------------------------
    def _follow(self, jobs, array: str, progress) -> list[int]:
        bar = FollowBar(progress)
        states: dict[str, str] = {}
        unanswered: list[str] = []   # what squeue said when it did not answer; the first is shown, once
        try:
            while True:
                shown = bool(unanswered)
                states = job_states(array, jobs, unanswered)
                if unanswered and not shown:
                    bar.say(f"harness: warning: squeue did not answer ({unanswered[0]}); the jobs' states are "
                            f"unknown until it does, and it is asked again every {POLL_S:g} s.")
                if all(s in ENDED for s in states.values()):
                    break
                bar.update(_summary(states))
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            # The workers get SIGTERM from Slurm and close their runs as interrupted themselves.
            subprocess.run(["scancel", array], capture_output=True, timeout=60)
            print(f"cancelled Slurm job {array}", flush=True)
            raise
        finally:
            if states:   # jobs that ended before the first poll still show how they ended
                bar.update(_summary(states))
            bar.close()
        return [_exit_code(job, states[job.job_id]) for job in jobs]


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """This process's environment with `values` set, restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_worker(command: list[str], env: dict[str, str]) -> int:
    """What each array task runs (inside submitit's job): one worker process, whose exit code it
    returns. Near the time limit Slurm sends USR2 to every process of the job; the worker ignores it
    (it would die of it) and gets SIGTERM from here instead, so it closes its run as interrupted and
    frees its claim for another worker."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # inherited by the worker
    proc = subprocess.Popen(command, env={**os.environ, **env})
    signal.signal(signal.SIGUSR2, lambda *_: proc.send_signal(signal.SIGTERM))
    return proc.wait()


def job_states(array: str, jobs, unanswered: list[str] | None = None) -> dict[str, str]:
    """Each job's Slurm state from squeue (which keeps ended jobs a few minutes); a job squeue no
    longer lists has COMPLETED when submitit wrote its result, else it is GONE. When squeue does not
    answer, a job without a result is UNKNOWN (no news) and squeue's complaint goes in `unanswered`."""
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i|%T"],
                             capture_output=True, text=True, timeout=60)
        said = out.stderr.strip() or out.stdout.strip() or f"exit status {out.returncode}"
        answered, complaint = out.returncode == 0, first_line(RuntimeError(said))
    except (OSError, subprocess.TimeoutExpired) as err:
        out, answered, complaint = None, False, first_line(err)
    listed = dict(line.split("|", 1) for line in out.stdout.split() if "|" in line) if answered else {}
    if not answered and unanswered is not None:
        unanswered.append(complaint)
    states = {}
    for job in jobs:
        state = listed.get(job.job_id)
        if state is None:
            if job.paths.result_pickle.exists():   # submitit wrote its result: the job has ended
                state = "COMPLETED"
            else:
                state = "GONE" if answered else "UNKNOWN"   # squeue did not answer this time: no news
        states[job.job_id] = state.split()[0]
    return states


def _summary(states: dict[str, str]) -> str:
    pending = sum(s == "PENDING" for s in states.values())
    running = sum(s in ("RUNNING", "COMPLETING", "CONFIGURING") for s in states.values())
    ended = [s for s in states.values() if s in ENDED]
    failed = sum(s != "COMPLETED" for s in ended)
    unknown = sum(s == "UNKNOWN" for s in states.values())   # squeue did not answer
    return (f"jobs: {pending} pending, {running} running, {len(ended) - failed} done, {failed} failed"
            + (f", {unknown} unknown" if unknown else ""))


def _exit_code(job, state: str) -> int:
    """The worker's exit code from submitit's result; a job killed before writing one: -SIGTERM
    when Slurm cancelled it or its time ran out, else 1."""
    if job.paths.result_pickle.exists():
        try:
            return int(job.result())
        except Exception:
            return 1
    return -signal.SIGTERM if state in ("CANCELLED", "TIMEOUT", "PREEMPTED") else 1


def _partitions() -> list[str]:
    out = _slurm(["sinfo", "-h", "-o", "%P"])
    return sorted({p.rstrip("*") for p in out.split()})


def node_shape(partition: str | None) -> NodeShape:
    """CPUs and GPUs of the partition's smallest node (`sinfo`: %c CPUs, %G generic resources)."""
    out = _slurm(["sinfo", "-h", "-o", "%c|%G", *(["-p", partition] if partition else [])])
    shapes = []
    for line in out.splitlines():
        cpus, _, gres = line.partition("|")
        gpus = sum(int(m) for m in re.findall(r"gpu(?::[\w.-]+)?:(\d+)", gres))
        shapes.append(NodeShape(int(cpus.rstrip("+")), gpus))
    if not shapes:
        raise UserError(f"Slurm lists no node in partition {partition or '(default)'}.")
    return NodeShape(min(s.cpus for s in shapes), min(s.gpus for s in shapes))


def _slurm(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"Slurm does not answer: `{' '.join(command)}` failed ({first_line(err)}).") from None
    if out.returncode != 0:
        raise UserError(f"Slurm does not answer: `{' '.join(command)}` says "
                        f"{first_line(RuntimeError(out.stderr or out.stdout))}.")
    return out.stdout


def minutes(text: str) -> int:
    """sbatch --time as whole minutes: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(text).strip())
    if not match:
        raise UserError(f"--slurm-time '{text}' is not a Slurm time (minutes, or [D-]HH:MM[:SS]).")
    days, a, b, c = (int(g) if g else None for g in match.groups())
    if days is not None:        # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:         # HH:MM:SS
        seconds = a * 3600 + b * 60 + c
    else:                       # MM[:SS]
        seconds = a * 60 + (b or 0)
    if seconds <= 0:
        raise UserError(f"--slurm-time '{text}' must be longer than zero.")
    return -(-seconds // 60)
