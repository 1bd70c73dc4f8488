"""Warm-up epochs that change nothing: snapshot what training changes, warm up, put it all back.

Why: a warm-up epoch is there so the clock does not time one-off costs (oneDNN primitive creation,
cuDNN autotuning, the caching allocator, DDP's bucket rebuild). If it also trained, a run with
`warmup_epochs=1` would be trained one epoch more than the document says and its accuracy would not
be the document's. So the warm-up runs on the very objects that are then timed (the same model,
optimizer, DDP wrapper: that is what warms them), and afterwards everything it changed is restored:

- a module's state_dict (parameters and buffers: BatchNorm running statistics and counters) and its
  parameters' gradients;
- an optimizer's state (momentum, Adam's moments and step count, the groups' lr), and anything else
  with state_dict / load_state_dict (a GradScaler, harness.training.precision.Precision, an lr schedule);
- a torch.Generator (a loop's data order), and plain tensors (d2l's hand-written parameters) with
  their gradients;
- the process-wide random streams: torch's CPU generator, every CUDA device's generator (when CUDA
  is initialised: reading it would otherwise create a context), Python's and numpy's.

    with restored(model, optimizer, order):
        warmup = train_epochs(model, optimizer, data.train, epochs=cfg.warmup_epochs, ...)

Restored in place (copied into the same tensors), so whatever holds the parameters (the optimizer,
DDP's gradient hooks) stays valid. In a DDP run each rank restores its own state and no collective
is involved: the warm-up epochs have finished every allreduce, the ranks were identical before the
warm-up, so they are identical after it. The snapshot is kept in host memory, so it takes nothing
from the device the timed epochs run on. A warm-up that raises is not restored: the cell fails.
"""

from __future__ import annotations

import copy
import random
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

__all__ = ["restored"]

Restore = Callable[[], None]


@contextmanager
def restored(*states: Any) -> Iterator[None]:
    """Run the block, then put each of `states` and the process's random streams back as they were."""
    undo = [_snapshot(state) for state in states] + [_snapshot_random_streams()]
    yield
    for restore in undo:
        restore()


def _snapshot(state: Any) -> Restore:
    if isinstance(state, torch.Tensor):
        return _snapshot_tensor(state)
    if isinstance(state, torch.Generator):
        saved = state.get_state()
        return lambda: state.set_state(saved)
    if isinstance(state, nn.Module):
        current = state.state_dict()
        weights = _to_host(current)
        if hasattr(current, "_metadata"):  # the modules' state versions, which load_state_dict reads
            weights._metadata = current._metadata
        grads = [_snapshot_tensor(p) for p in state.parameters()]

        def restore_module() -> None:
            state.load_state_dict(weights)   # copy_ into the module's own tensors
            for restore in grads:
                restore()
        return restore_module
    if hasattr(state, "state_dict") and hasattr(state, "load_state_dict"):  # optimizer, scaler, schedule
        saved = _to_host(state.state_dict())
        return lambda: state.load_state_dict(copy.deepcopy(saved))
    raise TypeError(f"cannot snapshot a {type(state).__name__}: give a module, optimizer, tensor, "
                    "generator, or an object with state_dict/load_state_dict")


def _snapshot_tensor(tensor: torch.Tensor) -> Restore:
    data = tensor.detach().to("cpu", copy=True)
    grad = None if tensor.grad is None else tensor.grad.detach().to("cpu", copy=True)

    def restore() -> None:
        with torch.no_grad():
            tensor.copy_(data)
        tensor.grad = None if grad is None else grad.to(tensor.device)
    return restore


def _snapshot_random_streams() -> Restore:
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    python = random.getstate()
    numpy = np.random.get_state()

    def restore() -> None:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        random.setstate(python)
        np.random.set_state(numpy)
    return restore


def _to_host(value: Any) -> Any:
    """A deep copy with every tensor copied to host memory (optimizer.load_state_dict moves each
    state back to its parameter's device; module.load_state_dict copies into the device tensors)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((k, _to_host(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    return copy.deepcopy(value)
