"""One invocation of `harness sweep` or `harness study`, in one of three modes: what both engines
share, so that each engine is only the loop that picks its next cell or trial.

- **Here** (one process): the engine's loop runs in this process, under a parent run this process
  opens and closes.
- **Launcher** (`--workers K`, `--launcher slurm`): the same command is started K times, each as
  one worker (`--worker INDEX:TOKEN:PARENT[:close]`, launchers.WorkerRole) with its share of the
  cores, its slice of the GPUs and the store locations in its environment. This process follows
  them and reads their outcome back from the store; a detached launcher leaves at once and the
  workers close the parent run themselves.
- **Worker** (`role`): the loop runs under the launcher's parent run, with claims carrying the
  invocation's token (workers of one invocation try a failing cell once between them).

In every mode the claims (store/claims.py) are open while the loop runs and a SIGTERM is taken as
Ctrl-C (signals.py). A parent run is never left RUNNING by a fault or an interrupt: a store that
refuses a write (StoreFault) closes it as failed, anything else as interrupted, each with a reason
saying how far the invocation got.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, TypeVar

from harness.distributed.placement import worker_gpu_env
from harness.errors import StoreFault, StoreGone
from harness.machine.fingerprint import fingerprint, machine_text
from harness.launchers import Launcher, LocalLauncher, Progress, WorkerRole, worker_command
from harness.signals import sigterm_as_interrupt
from harness.store import Claims, Outcome, Store
from harness.store.process import this_process
from harness.store.shared_db import check_url
from harness.store.tracking import DETACHED_HOST, HOST
from harness.store.uris import store_environment

if TYPE_CHECKING:
    from harness.specs.specfile import SpecFile

Log = Callable[[str], None]   # where an invocation and its engine say what they do (print, by default)
T = TypeVar("T")


@dataclass(frozen=True)
class Stopped:
    """What the parent run says when its invocation stops early."""
    failed: str = "stopped"   # the reason on a store fault, before ": <what the store said>"
    interrupted: str = "interrupted; run the same command again to resume"   # on Ctrl-C, SIGTERM, a crash
    tags: dict[str, Any] = field(default_factory=dict)   # the counts so far, as the parent's tags
    description: str | None = None   # the parent's description after an interrupt (None: left as it was)


@dataclass
class Invocation:
    """One `harness sweep` or `harness study` command: where it keeps its records and which mode it
    runs in (`launches`: this process starts workers; `role`: this process is one of them)."""
    kind: str        # "sweep" or "study": the subcommand the workers run, and the word the messages use
    unit: str        # what the invocation is made of, in its messages: "cells" or "trials"
    store: Store
    db_url: str      # the shared database: claims (and Optuna's studies)
    workers: int = 1
    launcher: Launcher | None = None
    role: WorkerRole | None = None
    log: Log | None = None
    experiment_id: str = ""   # the MLflow experiment, once open_experiment has opened it

    @property
    def launches(self) -> bool:
        """Whether this process starts workers instead of running the loop itself."""
        return self.role is None and (self.launcher is not None or self.workers > 1)

    def worker_overrides(self, overrides: dict[str, Any] | None,
                         fixed_threads: Callable[[dict[str, Any]], int | None]) -> dict[str, Any]:
        """The overrides the invocation runs with. Workers get the cores their launcher gives each
        (K workers on one machine: cores // K) where every cell would take all cores (threads 0, as
        `fixed_threads` reads it from the overrides; None: the grid varies them). A thread count the
        file fixes is kept: another count is another measurement, so it is in the cell id.
        The count is kept as text, the form a worker parses it back in from `--set threads=N`: the
        launcher and its workers run with equal overrides (a study's name is a digest of them)."""
        overrides = dict(overrides or {})
        if self.launches and fixed_threads(overrides) == 0:
            overrides["threads"] = str((self.launcher or LocalLauncher()).cores_per_worker(self.workers))
        return overrides

    def open_experiment(self, name: str) -> str:
        """The MLflow experiment, once the shared database's URL is known good; runs left RUNNING by
        processes that died are closed as interrupted before anything else happens."""
        check_url(self.db_url)
        self.experiment_id = self.store.experiment_id(name)
        self.store.reap_stale_runs(self.experiment_id)
        return self.experiment_id

    # --- worker ---------------------------------------------------------------------------------
    def as_worker(self, loop: Callable[[Claims], T], closing_tags: Callable[[T], dict[str, Any]],
                  faults: Callable[[], ContextManager] = contextlib.nullcontext) -> T:
        """Run the loop as one worker of a launcher's invocation, under its parent run. `faults`
        turns the engine's own storage errors into StoreFault. When the launcher detached, each
        worker closes the parent run as it ends, with `closing_tags` of its result (the workers wait
        for each other's units, so the last one closes it with every unit settled)."""
        claims = Claims(self.db_url, token=self.role.token)
        try:
            with sigterm_as_interrupt(), faults():  # a scheduler's stop closes the running unit as interrupted
                result = loop(claims)
        finally:
            claims.close()
        if self.role.closes_parent:
            self.store.end_run(self.role.parent_run_id, Outcome.OK, tags=closing_tags(result))
        return result

    # --- here, or the launcher ---------------------------------------------------------------------
    @contextlib.contextmanager
    def as_parent(self, parent: str, stopped: Callable[[], Stopped]) -> Iterator[Claims]:
        """The block that runs the invocation under its parent run, with this process's claims. The
        block closes the parent when it gets to the end; a fault or an interrupt in it closes the
        parent here (as far as the store still takes writes), with `stopped()`'s reason and tags."""
        claims = None
        with sigterm_as_interrupt():
            try:
                claims = Claims(self.db_url)  # also creates the claims table before any worker races to
                yield claims
            except StoreGone:
                raise  # nothing to close: the runs went with the old file, and its sentence says so
            except StoreFault as fault:
                now = stopped()
                closed = self.store.close_after_fault(parent, Outcome.FAILED, f"{now.failed}: {fault}", tags=now.tags)
                raise StoreFault(self.resumable(fault, closed)) from fault
            except BaseException:
                now = stopped()
                self.store.close_after_fault(parent, Outcome.INTERRUPTED, now.interrupted, tags=now.tags)
                if now.description is not None:
                    with contextlib.suppress(Exception):  # best effort: the store may be what failed
                        self.store.describe_run(parent, now.description)
                raise
            finally:
                if claims is not None:
                    claims.close()

    def resumable(self, fault: StoreFault, closed: bool) -> str:
        """The one sentence the CLI prints for a store fault that stopped the invocation."""
        return (f"{fault}; the {self.kind} stopped, its finished {self.unit} are kept and the same command "
                "resumes it once the store takes writes again"
                + ("" if closed else " (the runs it could not close are marked interrupted then)"))

    def launch(self, label: str, args: list[str], overrides: dict[str, Any], *, threads: int, parent: str,
               token: str, progress: Progress | None) -> list[int] | None:
        """Start the workers, each `harness KIND ARGS --set ...` as one worker of this invocation,
        and follow them (a bar of `progress()` when given). Their exit codes once they are done,
        the store checked and their runs left open by a killed worker closed; None when the
        launcher detached (the workers run on and close the parent run)."""
        launcher = self.launcher or LocalLauncher()
        roles = [WorkerRole(i, token, parent, closes_parent=launcher.detach) for i in range(self.workers)]
        if launcher.detach:  # this process leaves: no host's process owns the parent run any more
            self.store.set_tags(parent, {HOST: DETACHED_HOST})
        if self.log is not None:
            self.log(f"{label}: {self.workers} workers, {threads} thread(s) each")
        command = [self.kind, *args, *set_arguments(overrides)]
        envs = [worker_environment(threads, r.index, self.workers, self.store.uri, self.db_url) for r in roles]
        codes = launcher.run([worker_command(command, r) for r in roles], envs, progress)
        if codes is not None:
            self.store.check_still_there()
            self.store.reap_stale_runs(self.experiment_id)  # a worker killed mid-unit left its run open
        return codes

    def describe(self, spec: SpecFile, name: str, scale: str, contents: str, overrides: dict[str, Any],
                 tail: str = "") -> str:
        """The parent run's description: which file, at which scale, what it holds (`contents`),
        with which overrides, in how many workers, on which machine."""
        changed = ", ".join(f"`{k}={v}`" for k, v in overrides.items()) or "none"
        source = f" Source: {spec.source}." if spec.source else ""
        return (f"**{spec.title}**.{source}\n\n"
                f"{self.kind.capitalize()} `{name}` at scale **{scale}** from `{spec.path}`: {contents}; "
                f"overrides: {changed}; {self.workers} worker process(es){tail}.\n\n"
                f"Machine: {this_process().host} ({machine_text(fingerprint())}).")


def set_arguments(overrides: dict[str, Any]) -> list[str]:
    """The overrides as `--set KEY=VALUE` arguments that a worker's command line parses back to the
    same values (config.parse_assignment): a list as JSON, a single value as its text."""
    return [arg for key, value in overrides.items()
            for arg in ("--set", f"{key}={json.dumps(value) if isinstance(value, list) else value}")]


def worker_environment(threads: int, index: int, workers: int, tracking_uri: str, db_url: str) -> dict[str, str]:
    """What one worker's environment adds: its cores' worth of threads, its slice of the GPUs (none
    on a machine without), and the store locations, which travel here, never on a command line
    that `ps` shows."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **worker_gpu_env(index, workers),
            **store_environment(tracking_uri, db_url)}
