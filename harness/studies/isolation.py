"""Where a study's trials run: each in a fresh process of its own (`isolation = "process"`, the
default when an objective is measured by a clock), or one after another in the study's process
(`"none"`).

Trials sharing a process share what each leaves in it: torch's thread pools, the allocator's free
lists, oneDNN's primitive cache, torch.compile's loaded kernels and worker pool, flags set on the
floating-point unit. A time measured after other trials is then not the time the same trial takes
on its own, and a sampler learning from such times learns the order they ran in. Isolated, each
trial is a child forked from a server that has imported torch, the harness and the experiments
and run nothing (harness.launchers.forkserver): every trial starts from the same state, for the
price of a fork instead of an interpreter's imports.

The study's process keeps everything else: it claims the slot, asks Optuna, opens and closes the
MLflow run, logs each epoch, decides pruning and tells Optuna, exactly as for an in-process trial
(cells.run_cell). Only `experiment.run(cfg)` moves into the child, which sends each epoch's metrics
back, waits to hear whether to go on, and sends its result (or its error) back.

Every trial also records the state it started in (harness.machine.process_state: thread counts,
flush-denormal), so a state carried over from an earlier trial shows in its metrics.
"""

from __future__ import annotations

import builtins
import signal
import traceback
from typing import Any, Callable

from harness.machine import process_state
from harness.cells import run_here
from harness.fields.config import RunConfig
from harness.errors import CellPruned, CellSkipped, UserError
from harness.launchers.forkserver import ForkServer

PROCESS, NONE = "process", "none"
# What a trial needs, imported once by the server (no torch operation runs on import): every
# experiment module, and the compiler stack the FLOP counter and torch.compile import on first use
# (seconds of imports each child would otherwise repeat).
PRELOAD = ["torch", "torch._dynamo", "torch._inductor", "experiments", "harness.machine.machine_load", "harness.studies.isolation"]
CHILD = "harness.studies.isolation:trial_child"


class TrialProcessError(RuntimeError):
    """The trial's process ended without a result (killed, crashed)."""


def in_process(experiment, cfg: RunConfig, on_epoch: Callable[[int, dict], None]) -> dict[str, float]:
    """A trial in the study's own process, with the state it found there."""
    state = process_state.snapshot()
    return {**run_here(experiment, cfg, on_epoch), **state}


class IsolatedTrials:
    """One fork server for a study worker; `execute` runs one trial in a child of it."""

    def __init__(self) -> None:
        import experiments

        modules = [*PRELOAD, *sorted(set(experiments.registry().values())), *experiments.run_modules()]
        self.server = ForkServer(modules)   # it imports while the worker loads data and asks Optuna

    def execute(self, experiment, cfg: RunConfig, on_epoch: Callable[[int, dict], None]) -> dict[str, float]:
        server = self.server
        pid = server.start(CHILD, {"config": cfg.model_dump(mode="json")})
        result = error = None
        try:
            while True:
                message = server.channel.receive()
                if message is None:
                    raise TrialProcessError(f"the fork server died while trial process {pid} ran")
                if "epoch" in message:
                    try:
                        on_epoch(message["epoch"], message["metrics"])
                    except CellPruned:
                        server.channel.send({"go": False})
                        raise
                    server.channel.send({"go": True})
                elif "result" in message:
                    result = message["result"]
                elif "error" in message:
                    error = message
                elif "exit" in message:
                    server.child = None
                    code = message["exit"]
                    break
        except BaseException:
            if server.child is not None:  # Ctrl-C, SIGTERM, pruned, a store fault: the child stops too
                server.stop_child()
            raise
        if error is not None:
            raise rebuilt(error)
        if result is None:
            raise TrialProcessError(f"the trial's process {pid} ended with {_exit_text(code)} before it "
                                    "returned a result")
        return result

    def close(self) -> None:
        self.server.close()


class _InProcess:
    execute = staticmethod(in_process)

    def close(self) -> None:
        pass


def runner(isolation: str):
    """The trial runner for a study's isolation setting; close() it when the worker is done."""
    return IsolatedTrials() if isolation == PROCESS else _InProcess()


def rebuilt(error: dict[str, Any]) -> BaseException:
    """The child's exception as the same kind here, so the run records the same reason as in process;
    the child's traceback goes with it as a note (cells.run_cell logs it as traceback.txt)."""
    name, message = error["error"], error["message"]
    if name == "CellSkipped":
        err: BaseException = CellSkipped(message)
    elif error.get("user"):
        err = UserError(message)
    else:
        known = getattr(builtins, name, None)
        try:
            err = known(message) if isinstance(known, type) and issubclass(known, Exception) else None
        except Exception:
            err = None
        err = err or type(name, (Exception,), {})(message)   # torch's OutOfMemoryError and the like, by name
    err.add_note("in the trial's own process:\n" + error.get("traceback", ""))
    return err


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class _Stop(Exception):
    """The study said stop (pruned): the child leaves without a result."""


def trial_child(payload: dict[str, Any], channel) -> None:
    """In the forked child: set the threads, run the experiment, send the epochs and the result."""
    import torch

    import experiments
    from experiments import make_config
    from harness.machine.hardware import usable_core_count
    from harness.signals import sigterm_as_interrupt
    from harness.training.timing import peak_rss_mb, reset_peak_rss

    with sigterm_as_interrupt():   # a SIGTERM (the server died, the worker stopped us) ends DDP ranks too
        cfg = make_config(payload["config"])
        state = process_state.snapshot()   # what the trial found: the server's state, the same every time
        torch.set_num_threads(cfg.threads or usable_core_count())
        reset_peak_rss()

        def on_epoch(epoch: int, metrics: dict) -> None:
            channel.send({"epoch": epoch, "metrics": {k: v for k, v in metrics.items()
                                                      if isinstance(v, (int, float, str))}})
            answer = channel.receive()
            if not (answer and answer.get("go")):
                raise _Stop()

        try:
            metrics = run_here(experiments.get(cfg.experiment), cfg, on_epoch)
        except _Stop:
            return
        except Exception as err:
            channel.send({"error": type(err).__name__, "message": str(err), "user": isinstance(err, UserError),
                          "traceback": traceback.format_exc()})
            return
        metrics.update(state)
        metrics.setdefault("peak_rss_mb", peak_rss_mb())
        metrics.setdefault("threads_used", torch.get_num_threads())
        channel.send({"result": {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}})
