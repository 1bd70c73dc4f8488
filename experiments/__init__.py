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
    "data_parallel": ("experiments.data_parallel",
                      "T9.1-T10.2, D12.6: threads, or DDP over world_size torchrun processes / GPUs"),
    "dp_scratch": ("experiments.dp_scratch",
                   "D12.5: hand-written data parallel (copies, split batch, allreduce) vs DDP vs one device"),
    "autoparallel": ("experiments.autoparallel",
                     "D12.3: two GPUs queued without synchronizing; compute overlapped with copies to the host"),
}


def load(name: str) -> ModuleType:
    return importlib.import_module(EXPERIMENTS[name][0])


# --- temporary bridge to the descriptor interface (replaced by the descriptors branch) ---------
from types import SimpleNamespace  # noqa: E402


def names() -> list[str]:
    return list(EXPERIMENTS)


def get(name: str):
    module = load(name)
    return SimpleNamespace(name=name, title=EXPERIMENTS[name][1], run=module.run, clock=module.CLOCK,
                           needs_dataset=getattr(module, "TRAINS", True),
                           metrics=getattr(module, "METRICS", ("train_time_s", "test_accuracy")))


def check_reads(name: str, keys) -> None:
    return None
