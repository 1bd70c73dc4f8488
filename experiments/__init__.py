"""Registry of the documents' experiments. Each is a module with `run(cfg, on_epoch=None) -> metrics`
and a `CLOCK` string saying what its timings contain. The CLI, the sweep engine and the tests all
call that same function."""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> (module, one line for `harness list`)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "pruning": ("experiments.pruning", "T6.1: train, prune Conv2d filters by L1 norm, train timed, test"),
    "data_parallel": ("experiments.data_parallel",
                      "T9.1-T10.2, D12.6: threads, or DDP over world_size torchrun processes / GPUs"),
    "dp_scratch": ("experiments.dp_scratch",
                   "D12.5: hand-written data parallel (copies, split batch, allreduce) vs DDP vs one device"),
    "autoparallel": ("experiments.autoparallel",
                     "D12.3: two GPUs queued without synchronizing; compute overlapped with copies to the host"),
}


def load(name: str) -> ModuleType:
    return importlib.import_module(EXPERIMENTS[name][0])
