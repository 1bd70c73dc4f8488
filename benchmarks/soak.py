"""make soak [ARGS="--minutes 2"]: three sweeps and a two-worker study on ONE SQLite store for N
minutes (default 10) while a random harness process (a sweep, the study's launcher or one of its
workers) is SIGKILLed every 20-40 s and its command restarted; then every command is run to the
end without kills, and the store is read back.

Printed figures (the ones marked "must be" make the exit status 1 when they are not):
  kills, restarts, rounds finished per command, cells finished,
  cells with more than one FINISHED record (must be 0), runs left RUNNING (must be 0),
  study trials finished against those asked (must be equal), "database is locked" errors (must be 0).

Each command works in rounds: when it finishes before the deadline it starts again with another
seed (`--set seed=ROUND`: new cells, a new study), so the store keeps growing for the whole soak.
A killed command is restarted on the same round and must pick up where it was cut off. Every
process's output goes to FOLDER/logs/, kept for reading when a figure is wrong.

`--busy-loops N` runs N processes spinning on a core each, at normal priority, for the whole soak:
the machine a user shares with other work, where a starved worker must still not lose, repeat or
strand a cell. It is a correctness check; its times say nothing about the harness's speed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Tiny cells: a second or two each on one core, so hundreds run in ten minutes.
TINY = textwrap.dedent("""\
    model = "tiny_cnn"
    dataset = "synthetic"
    train_limit = 256
    test_limit = 128
    epochs = 2
    warmup_epochs = 0
    lr = 0.01
    threads = 1
    pruning_backend = "torch-pruning"
    """)
SWEEP = 'name = "{name}"\nexperiment = "pruning"\nrepeats = 2\n[base]\n' + TINY + \
        "batch_size = {batch}\n[grid]\nsparsity = [0.0, 0.25, 0.5, 0.75]\n"
STUDY = textwrap.dedent("""\
    name = "study_soak"
    experiment = "pruning"
    metric = "test_accuracy"
    direction = "maximize"
    n_trials = {trials}
    [space]
    lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
    batch_size = {{ choices = [16, 32, 64] }}
    [sampler]
    name = "random"
    seed = 0
    [base]
    """) + TINY.replace("lr = 0.01\n", "")


@dataclass
class Job:
    """One command, restarted after each kill; a finished round starts the next while time is left."""
    name: str
    args: list[str]
    logs: Path
    round: int = 0
    proc: subprocess.Popen | None = None
    started: int = 0
    rounds_done: list[int] = field(default_factory=list)
    done: bool = False  # its last round finished after the kills stopped
    resumed: int = 0    # starts of a round that a kill (or a failure) cut short

    def start(self) -> None:
        self.started += 1
        log = open(self.logs / f"{self.name}-r{self.round}-{self.started}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "harness", *self.args, "--no-progress",
                                      "--set", f"seed={self.round}"],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()  # the child holds its own copy


@contextlib.contextmanager
def busy_loops(count: int):
    """`count` processes that spin on a CPU until the block ends (killed then, whatever happened)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def soak_processes(marker: str) -> list[psutil.Process]:
    """Every live harness process of this soak (orphaned study workers included): their command
    lines name the soak's store."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(marker in part for part in cmdline) and "harness" in cmdline:
            found.append(proc)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long processes are killed (default 10)")
    parser.add_argument("--trials", type=int, default=6, help="trials per study round (default 6)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(20.0, 40.0), metavar=("MIN_S", "MAX_S"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--dir", help="working folder (default: a new temporary folder, kept)")
    parser.add_argument("--busy-loops", type=int, default=0, metavar="N",
                        help="N processes spinning on a core each beside the soak, at normal priority (default 0)")
    args = parser.parse_args()
    if args.busy_loops < 0:
        parser.error(f"--busy-loops must be 0 or more (got {args.busy_loops})")
    with busy_loops(args.busy_loops):
        return soak(args)


def soak(args) -> int:

    folder = Path(args.dir or tempfile.mkdtemp(prefix="harness-soak-"))
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    store_args = ["--tracking-uri", uri]
    sweeps = []
    for name, batch in (("soak_a", 32), ("soak_b", 64), ("soak_c", 16)):
        path = folder / f"{name}.toml"
        path.write_text(SWEEP.format(name=name, batch=batch))
        sweeps.append(Job(name, ["sweep", str(path), *store_args], logs))
    study_file = folder / "study_soak.toml"
    study_file.write_text(STUDY.format(trials=args.trials))
    study = Job("study", ["study", str(study_file), "--workers", "2", "--out", str(folder / "reports"), *store_args],
                logs)
    jobs = [*sweeps, study]

    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    print(f"soak: {args.minutes:g} min of kills every {args.kill_every[0]:g}-{args.kill_every[1]:g} s on "
          f"{socket.gethostname()} ({os.cpu_count()} cores, load {load_before[0]:.1f}"
          + (f", {args.busy_loops} busy loops beside it" if args.busy_loops else "") + f"); store {uri}", flush=True)
    started = time.monotonic()
    deadline = started + 60 * args.minutes
    next_kill = started + rng.uniform(*args.kill_every)
    kills: Counter = Counter()
    for job in jobs:
        job.start()
    while True:
        now = time.monotonic()
        killing = now < deadline
        for job in jobs:
            code = job.proc.poll()
            if job.done or code is None:
                continue
            if code == 0:
                job.rounds_done.append(job.round)
                if not killing:
                    job.done = True
                    continue
                job.round += 1
            else:
                job.resumed += 1
            job.start()  # a killed or failed command resumes its round; a finished one starts the next
        if killing and now >= next_kill:
            victims = soak_processes(str(folder))
            if victims:
                victim = rng.choice(victims)
                role = "study worker" if "--worker" in victim.cmdline() else \
                       "study launcher" if "study" in victim.cmdline() else "sweep"
                try:
                    victim.send_signal(signal.SIGKILL)
                    kills[role] += 1
                    print(f"  {now - started:6.0f} s: SIGKILL {role} {victim.pid}", flush=True)
                except psutil.NoSuchProcess:
                    pass
            next_kill = now + rng.uniform(*args.kill_every)
        if not killing and all(j.done for j in jobs) and not soak_processes(str(folder)):
            break  # every round finished, orphaned study workers included
        time.sleep(0.5)
    wall = time.monotonic() - started
    return report(folder, uri, jobs, kills, wall, args.trials, load_before)


def report(folder: Path, uri: str, jobs: list[Job], kills: Counter, wall: float, trials: int,
           load_before: tuple[float, float, float]) -> int:
    import optuna

    from harness.store import Store
    from harness.store.tracking import CELL_ID
    from harness.specs import study_spec

    store = Store(uri)
    finished, duplicates, running = Counter(), 0, []
    for name in ("soak_a", "soak_b", "soak_c", "study_soak"):
        experiment = store.find_experiment(name)
        runs = store.runs(experiment) if experiment else []
        running += [r for r in runs if r.status == "RUNNING"]
        if name.startswith("soak_"):
            ok = Counter(r.tags[CELL_ID] for r in runs if CELL_ID in r.tags and r.finished_ok)
            finished[name] = len(ok)
            duplicates += sum(1 for n in ok.values() if n > 1)
    spec = study_spec.load(str(folder / "study_soak.toml"))
    storage = f"sqlite:///{folder / 'optuna.db'}"
    study_job = next(j for j in jobs if j.name == "study")
    asked = done = 0
    for round_ in sorted(set(study_job.rounds_done)):
        loaded = optuna.load_study(study_name=spec.study_name("full", {"seed": str(round_)}), storage=storage)
        asked += trials
        done += sum(t.state.name in ("COMPLETE", "PRUNED") for t in loaded.trials)
    locked = [p.name for p in sorted((folder / "logs").glob("*.log"))
              if "database is locked" in p.read_text(errors="replace")]
    load_after = os.getloadavg()

    print(f"soak finished in {wall / 60:.1f} min; load average {load_before[0]:.1f} at the start, "
          f"{load_after[0]:.1f} / {load_after[1]:.1f} / {load_after[2]:.1f} (1/5/15 min) at the end")
    print(f"  kills:                                  {sum(kills.values())} ({', '.join(f'{n} {r}' for r, n in kills.items()) or 'none'})")
    print(f"  commands restarted after a kill:        {sum(j.resumed for j in jobs)}")
    print("  rounds finished:                        " + ", ".join(f"{j.name} {len(set(j.rounds_done))}" for j in jobs))
    print(f"  cells finished:                         {sum(finished.values())} ({', '.join(f'{k} {v}' for k, v in finished.items())})")
    print(f"  cells with more than one FINISHED:      {duplicates}")
    print(f"  runs left RUNNING:                      {len(running)}")
    print(f"  study trials finished / asked:          {done} / {asked}")
    print(f"  'database is locked' errors:            {len(locked)}" + (f" (in {', '.join(locked[:5])})" if locked else ""))
    print(f"  logs: {folder / 'logs'}")
    for run in running[:5]:
        print(f"    RUNNING: {run.name} ({run.run_id}, pid {run.tags.get('harness.pid')})")
    return 0 if duplicates == 0 and not running and done == asked and not locked else 1


if __name__ == "__main__":
    sys.exit(main())
