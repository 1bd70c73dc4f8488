"""Speed methods that stack, each a small transform of the model, its inputs or the step, usable on
its own; `check` says why a combination cannot run here (a skipped cell with that reason, never a
crash). The recipe experiment applies them in this order:

    prune_at_init(model, sparsity, example)   # fewer Conv2d filters from the start (T6.1's method)
    to_channels_last(model)                   # NHWC weights; batches follow (train_epochs memory_format)
    DistributedDataParallel(model)            # world_size ranks x threads each (harness.distributed)
    compiled(net, mode, backend)              # torch.compile; it compiles during the first steps
    Precision.for_device(device, dtype)       # autocast (+ GradScaler for fp16), harness.training.precision

and trains at train.lr_effective(cfg): lr x lr_factor, scaled linearly with the global batch
(lr_base_batch; Goyal et al. 2017).
"""

from __future__ import annotations

import shutil

import torch
from torch import nn

from harness.training.config import RunConfig
from harness.errors import CellSkipped
from harness.training.models import MODELS, build_model
from harness.training.pruning import prune_conv_filters


def check(cfg: RunConfig) -> None:
    """Raise CellSkipped with the reason when this combination of methods cannot run here.
    (Placement, backends and dtypes are checked where they are applied: placement.check_can_run
    and Precision.for_device raise their own CellSkipped.)"""
    image_model = len(MODELS[cfg.model].input_shape) == 3
    if cfg.channels_last and not image_model:
        raise CellSkipped(f"channels_last is a layout for 4-D image batches; model {cfg.model} takes "
                          f"{MODELS[cfg.model].input_shape} features")
    if cfg.execution == "script":
        raise CellSkipped("execution=script (TorchScript, deprecated) is D12.1's inference comparison; "
                          "a recipe trains eager or compiled")
    if cfg.execution == "compile" and cfg.compile_backend == "inductor" and cfg.device == "cpu" and not compiler():
        raise CellSkipped("torch.compile's inductor backend needs a C++ compiler on CPU and none is on PATH")
    if cfg.sparsity > 0 and not any(isinstance(m, nn.Conv2d) for m in build_model(cfg.model).modules()):
        raise CellSkipped(f"sparsity removes Conv2d filters and model {cfg.model} has no nn.Conv2d")


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def prune_at_init(model: nn.Module, sparsity: float, example: torch.Tensor, backend: str) -> nn.Module:
    """Remove `sparsity` of every Conv2d's filters before training. At initialisation the L1 norms
    rank random weights, so this trains a narrower network of the same shape of layers."""
    return prune_conv_filters(model, sparsity, example, backend)


def to_channels_last(model: nn.Module) -> nn.Module:
    """4-D weights in NHWC; convolutions then run channels-last (oneDNN on CPU, cuDNN on GPUs)."""
    return model.to(memory_format=torch.channels_last)


def compiled(net: nn.Module, mode: str, backend: str) -> nn.Module:
    """torch.compile, cold: no graph is reused from an earlier cell in this process, so every cell
    pays its own compilation (inside its clock, as part of its time to accuracy)."""
    torch._dynamo.reset()
    return torch.compile(net, mode=mode, backend=backend)
