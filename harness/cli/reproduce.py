"""`harness reproduce --scale cpu --data-dir D`: every sweep that has the scale, in the documents'
order, then REPRODUCTION.md over them. What runs is read from the sweep files, never kept by hand:
a sweep with a `[scales.cpu]` is in the cpu reproduction, and it is given the data folder when
its experiment trains on a dataset (`needs_dataset`; the others make their own inputs).

Each sweep runs as a process of its own (`harness sweep`), so one sweep's threads, caches and
memory never reach the next. A sweep whose cells failed (exit 1) does not stop the others; a
mistake (2) or Ctrl-C (130) stops them all, with that exit status. Run it again to resume: every
finished cell is reused, the one cut off runs again. Exit 1 at the end when cells failed."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from harness.cli.exits import EXIT_FAILED_CELLS, EXIT_INTERRUPTED
from harness.errors import UserError


@dataclass(frozen=True)
class Planned:
    sweep: str
    data_dir: str | None    # the --set data_dir= it is given, or None when it makes its own inputs


def plan(scale: str, data_dir: str, sweeps: list[str] | None = None) -> list[Planned]:
    """The sweeps with `scale` (of `sweeps` when given: a results folder that holds some tables), in
    the documents' order, each with the data folder if it needs one."""
    import experiments
    from harness.report.order import in_document_order
    from harness.specs import sweep_spec

    specs = {name: sweep_spec.load(name) for name in (sweeps or sweep_spec.available())}
    lacking = [name for name, spec in specs.items() if scale not in spec.scales]
    if sweeps and lacking:
        raise UserError(f"{', '.join(lacking)} has no [scales.{scale}] table, so it cannot be reproduced at scale "
                        f"'{scale}'; leave it out of --sweeps.")
    chosen = {name: spec.title for name, spec in specs.items() if name not in lacking}
    if not chosen:
        raise UserError(f"no sweep file has a [scales.{scale}] table, so there is nothing to reproduce at "
                        f"scale '{scale}'.")
    return [Planned(name, data_dir if experiments.get(specs[name].experiment).needs_dataset else None)
            for name in in_document_order(chosen)]


def sweep_command(planned: Planned, scale: str) -> list[str]:
    """One sweep's command line. The store it writes to is not on it (a password would show in
    `ps`): the sweep reads it from the environment (store_environment)."""
    command = [sys.executable, "-m", "harness", "sweep", planned.sweep, "--scale", scale]
    if planned.data_dir is not None:
        command += ["--set", f"data_dir={planned.data_dir}"]
    return command


def reproduce(planned: list[Planned], scale: str, store, out_dir, sweeps: list[str] | None = None) -> int:
    """Run the planned sweeps one after another into `store`, then write the report (over `sweeps`
    alone when given); the exit status."""
    from harness.cli import emulated_dtype
    from harness.report.reproduction import write_reproduction
    from harness.store.uris import store_environment

    emulated_dtype.warn_plan([item.sweep for item in planned], scale)
    failed = []
    env = {**os.environ, **store_environment(store.uri)}   # the store the report then reads
    for item in planned:
        print(f"== reproduce: sweep {item.sweep} at scale {scale}", flush=True)
        code = _run(sweep_command(item, scale), env)
        if code < 0:   # the sweep was killed by a signal: stop here as if it had been interrupted
            return EXIT_INTERRUPTED
        if code >= 2:
            return code
        if code != 0:
            failed.append(item.sweep)
    path, summary = write_reproduction(store, out_dir, sweeps)
    print(f"written: {path}\nsummary: {summary}")
    settle_committed_store(store)
    if failed:
        print(f"reproduce: cells failed in {' '.join(failed)} (each recorded with its reason; run it again to "
              "retry them).", file=sys.stderr)
        return EXIT_FAILED_CELLS
    return 0


def settle_committed_store(store) -> None:
    """A store written beside a committed report is left as a commit holds it: its write-ahead logs
    folded in, journal_mode = DELETE (a read-only open then writes nothing beside it)."""
    modes = store.settle_for_commit()
    left = [name for name, mode in modes.items() if mode != "delete"]
    if left:
        print(f"note: {', '.join(left)} is still open in another process, so it stays in WAL mode; run the "
              "command again once nothing else uses the store, before committing it.", file=sys.stderr)


def _run(command: list[str], env: dict[str, str]) -> int:
    """The sweep's exit status. On Ctrl-C the sweep got the signal too: wait while it closes its
    runs (it exits 130), rather than killing it mid-write."""
    process = subprocess.Popen(command, env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.wait()
        raise
