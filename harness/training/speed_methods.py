"""Speed methods that stack, each a small transform of the model, its inputs or the step, usable on
its own; `check` says why a combination cannot run here (a skipped cell with that reason, never a
crash). What each changes besides speed is catalogue.SPEED_METHODS. The recipe experiment applies
them in this order:

    with_batchnorm(model)                     # a BatchNorm2d after every Conv2d (batchnorm)
    prune_at_init(model, sparsity, example)   # fewer Conv2d filters from the start (T6.1's method)
    to_channels_last(model)                   # NHWC weights; batches follow (train_epochs memory_format)
    averaged(model, ema_decay)                # the weight average every evaluation reads (ema_decay)
    DistributedDataParallel(model)            # world_size ranks x threads each (harness.distributed)
    compiled(net, mode, backend)              # torch.compile; it compiles during the first steps
    Precision.for_device(device, dtype)       # autocast (+ GradScaler for fp16), harness.training.precision

and trains at train.lr_effective(cfg): lr x lr_factor, scaled linearly with the global batch
(lr_base_batch; Goyal et al. 2017), held (lr_schedule=constant) or as the peak of one_cycle(optimizer),
on smoothed_loss(label_smoothing), each batch cut down by SelectiveBackprop in its window.
"""

from __future__ import annotations

import shutil
from typing import Callable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from harness.fields.config import RunConfig
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
    if getattr(cfg, "batchnorm", False):
        unfit = batchnorm_unfit(build_model(cfg.model))
        if unfit:
            raise CellSkipped(f"batchnorm inserts a BatchNorm2d after each Conv2d of a plain CNN and model "
                              f"{cfg.model} {unfit}")


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


# --- methods the book does not have ------------------------------------------------------------

def batchnorm_unfit(model: nn.Module) -> str | None:
    """Why `with_batchnorm` cannot take this model (as the end of a sentence), or None. It inserts into
    nn.Sequential blocks; a model that normalises already would be normalised twice."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        return "has no nn.Conv2d"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "has BatchNorm layers already"
    in_blocks = {id(c) for m in model.modules() if isinstance(m, nn.Sequential) for c in m}
    if any(id(conv) not in in_blocks for conv in convs):
        return "has a Conv2d outside an nn.Sequential block, where none can be inserted after it"
    return None


def with_batchnorm(model: nn.Module) -> nn.Module:
    """A BatchNorm2d after every Conv2d, in the Conv2d's own nn.Sequential block, so the book's CNN
    runs conv, BatchNorm, ReLU, pool (Ioffe & Szegedy 2015): activations at a fixed scale, which lets
    a larger lr train. The convs keep their names (layer1.0), and pruning afterwards removes each
    pruned filter's BatchNorm channel with it. The conv keeps its bias, which the BatchNorm makes
    redundant: the model changes by the normalisation alone."""
    blocks = [m for m in model.modules() if isinstance(m, nn.Sequential)]
    for block in blocks:
        convs = [i for i, m in enumerate(block) if isinstance(m, nn.Conv2d)]
        for i in reversed(convs):   # from the back, so the earlier indices stay put
            block.insert(i + 1, nn.BatchNorm2d(block[i].out_channels))
    return model


def forget_batchnorm_statistics(model: nn.Module) -> nn.Module:
    """Running BatchNorm statistics back to their initial values: NNI's speed-up traces the example
    batch through the model in training mode, which leaves them holding that batch."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
    return model


def one_cycle_factor(step: int, total: int, warmup_fraction: float) -> float:
    """The share of the peak lr that optimizer step `step` (from 0) of a `total`-step cycle trains at:
    a linear rise over the first `warmup_fraction` of the steps to 1 at their last (step 0 already above
    0: no step is spent at lr 0), a linear fall to 0 at step `total`, and 0 after it."""
    warm = round(warmup_fraction * total)
    peak = max(warm - 1, 0)
    if step < peak:
        return (step + 1) / warm
    return max(0.0, (total - step) / (total - peak))


def one_cycle(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float) -> LambdaLR:
    """The one-cycle schedule on `optimizer`, whose lr is its peak; `.step()` after every optimizer
    step. Planned over `total_steps` fixed in advance (schedule_epochs), so a run that stops at its
    target has trained on the same schedule as one that goes on (Smith & Topin 2017)."""
    return LambdaLR(optimizer, lambda step: one_cycle_factor(step, total_steps, warmup_fraction))


def smoothed_loss(label_smoothing: float) -> nn.CrossEntropyLoss:
    """Cross-entropy against targets with `label_smoothing` of their weight spread evenly over the
    classes (0: the book's loss)."""
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)


def averaged(model: nn.Module, decay: float) -> AveragedModel:
    """An exponential moving average of `model`'s weights: `.update_parameters(model)` after every
    optimizer step, `.module` to evaluate. BatchNorm's running statistics are averaged too
    (use_buffers), so the averaged weights are evaluated with statistics of their own kind rather
    than the raw model's latest. Pass the module itself, not DDP's or torch.compile's wrapper: the
    wrappers share its tensors, and the copy must not be a DDP module of its own."""
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)


class SelectiveBackprop:
    """Selective backprop (Jiang et al. 2019, "Accelerating Deep Learning by Focusing on the Biggest
    Losers"), written after MosaicML Composer's SelectiveBackprop and select_using_loss
    (composer/algorithms/selective_backprop/selective_backprop.py): inside a window of training,
    each batch is scored by a forward pass without gradients and the step trains on `keep` of it,
    drawn without replacement with probability rising with the loss's rank (rank percentile to the
    power 1/keep - 1); every `interrupt`-th batch of an epoch is a plain step.

    Why this one of Composer's methods: the book's CNN flattens its last feature map into fc1, whose
    input size is fixed by the image size (64 x 8 x 8 for 32x32 images), so progressive resizing and
    ColOut, which shrink the images, do not fit it without changing the model; selective backprop
    leaves the images and the model alone. Composer's scale_factor (scoring on downsampled images)
    is left out for the same reason: it is 1, scoring at full size.

    The scoring pass runs the training model in training mode, as Composer's does (BatchNorm then
    updates its running statistics on it too), under the step's autocast. The draw is seeded: the
    same run draws the same samples."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor], loss: Callable[..., torch.Tensor], *,
                 keep: float, start: float, end: float, interrupt: int, steps_per_epoch: int, epochs: int,
                 autocast: Callable, generator: torch.Generator):
        self.model, self.loss, self.keep, self.autocast, self.generator = model, loss, keep, autocast, generator
        self.start, self.end, self.interrupt = start, end, interrupt
        self.steps_per_epoch, self.total = steps_per_epoch, steps_per_epoch * epochs
        self.step = 0          # batches seen so far, this one not yet
        self.selected = 0      # steps that trained on a selection

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        applies = self.applies(self.step)
        self.step += 1
        if not applies:
            return x, y
        self.selected += 1
        with torch.no_grad(), self.autocast():
            losses = self.loss(self.model(x), y, reduction="none")
        chosen = self.draw(losses)
        return x[chosen], y[chosen]

    def applies(self, step: int) -> bool:
        """Whether batch `step` (from 0) is cut down: inside the window and not an interrupting batch
        (Composer's should_selective_backprop, the batch counted within its epoch)."""
        elapsed = step / self.total
        in_epoch = step % self.steps_per_epoch
        interrupted = self.interrupt > 0 and (in_epoch + 1) % self.interrupt == 0
        return self.start <= elapsed < self.end and not interrupted

    def draw(self, losses: torch.Tensor) -> torch.Tensor:
        """Indices of the samples to train on: `keep` of them, at least one, favouring high losses."""
        n = len(losses)
        ranked = torch.argsort(losses.float())                   # lowest loss first
        percentiles = (torch.arange(n, dtype=torch.float64) + 0.5) / n
        weights = percentiles ** (1.0 / self.keep - 1.0)
        picks = torch.multinomial(weights, max(1, int(self.keep * n)), replacement=False, generator=self.generator)
        return ranked[picks.to(ranked.device)]
