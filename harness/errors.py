"""Exceptions with a meaning for the user and for the sweep engine."""


class UserError(Exception):
    """A mistake in what the user asked for. The CLI prints the message as one sentence and exits 2."""


class CellSkipped(Exception):
    """This cell cannot run here (missing backend, too few devices, no GPU). The sweep records the
    reason and goes on; the cell is tried again on the next invocation."""


class CellPruned(Exception):
    """A study's pruner stopped this trial early (its per-epoch accuracy was too weak). Recorded as
    pruned, not failed."""
