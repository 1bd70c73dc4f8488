"""Registry of the documents' experiments. Each is a module with `run(cfg, on_epoch=None) -> metrics`
and a `CLOCK` string saying what its timings contain. The CLI, the sweep engine and the tests all
call that same function. A metric value that is a string (a captured warning, the dtype autocast
produced) is logged as the tag `harness.note.<key>` instead of a metric."""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> (module, one line for `harness list`)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "pruning": ("experiments.pruning", "T6.1: train, prune Conv2d filters by L1 norm, train timed, test"),
    "amp": ("experiments.amp", "T7: train with autocast in fp32 | bf16 | fp16 (+ GradScaler), timed, test"),
    "hybridize": ("experiments.hybridize", "D12.1: forward-pass time eager vs torch.jit.script vs torch.compile"),
    "async": ("experiments.asynchronous", "D12.2: random-then-matmul in numpy and torch, clock read with and without sync"),
}


def load(name: str) -> ModuleType:
    return importlib.import_module(EXPERIMENTS[name][0])
