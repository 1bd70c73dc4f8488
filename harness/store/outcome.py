"""What became of a cell (a grid cell or a study trial), as stored in its MLflow run and as the
engines report it."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    # Recorded in the cell's run (tag harness.outcome); the MLflow status follows from it.
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"            # cannot run here (no GPU, backend missing); tried again next time
    PRUNED = "pruned"              # a study's pruner stopped the trial early
    INTERRUPTED = "interrupted"    # Ctrl-C, SIGTERM, or its process died
    # Only in an engine's result: what this invocation did with a cell it did not run itself.
    REUSED = "reused"              # finished earlier, its record kept
    BUSY = "busy"                  # a live process of another invocation is running it now
    ELSEWHERE = "elsewhere"        # another worker of this invocation took it
    NOT_RUN = "not run"            # no worker reached it (the invocation was cut short)

    @property
    def mlflow_status(self) -> str:
        return {Outcome.FAILED: "FAILED", Outcome.INTERRUPTED: "KILLED"}.get(self, "FINISHED")


# The order a summary lists them in.
SUMMARY_ORDER = (Outcome.OK, Outcome.REUSED, Outcome.PRUNED, Outcome.SKIPPED, Outcome.FAILED, Outcome.BUSY,
                 Outcome.ELSEWHERE, Outcome.INTERRUPTED, Outcome.NOT_RUN)
