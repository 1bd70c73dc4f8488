"""The training loop every experiment shares, and what it needs around it (threads, seed, device).

What is inside the clock, stated once: for each timed epoch, taking the mini-batches from the
in-memory tensors, moving them to the device (on CUDA through pinned buffers, so the copy is queued
and the host goes on; see data.DeviceBatches), forward, loss, backward and the optimizer step, and
whatever a recipe's methods do at each step (a selection's scoring pass, an lr schedule's step, a
weight average's update: train_epochs' select and after_step).
Outside it: warm-up epochs, pruning, evaluation, logging and the per-epoch callback. The device is
synchronized before each reading (see timing.timed). Warm-up epochs are undone afterwards (model,
optimizer and random streams restored, harness.training.warmup): they warm the clock and train nothing.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch import nn

from harness.fields.catalogue import TRAINING_CLOCK
from harness.fields.config import RunConfig
from harness.training.data import DeviceBatches, Split, batches, shuffled_indices
from harness.errors import CellSkipped
from harness.machine.hardware import missing_gpu, slice_note, usable_core_count
from harness.training.timing import spread, timed

if TYPE_CHECKING:
    from harness.training.precision import Precision
    from harness.training.time_to_accuracy import AccuracyWatch

CLOCK = TRAINING_CLOCK   # harness/fields/catalogue.py, where descriptors read it without torch

EpochCallback = Callable[[int, dict], None]
# A batch in, the part of it a step trains on out (speed_methods.SelectiveBackprop).
BatchSelection = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def prepare(cfg: RunConfig) -> torch.device:
    """Apply threads and seed; return the device, or raise CellSkipped when it is not here."""
    torch.set_num_threads(cfg.threads or usable_core_count())
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    missing = missing_gpu(cfg.device)
    if missing:
        raise CellSkipped(f"device '{cfg.device}' was asked for but {missing}" + slice_note())
    return device


def lr_effective(cfg: RunConfig, world_size: int | None = None) -> float | None:
    """The learning rate a cell trains with, worked out here and nowhere else (None: it has no `lr`):
    `lr`, times `lr_factor` (a tuned lr, recipe's SpeedMethodsFields), scaled linearly with the global
    batch over `lr_base_batch` (SpeedMethodsFields), or times the ranks with `lr_scaling` (data_parallel's
    LrScalingFields: the rate a linear_warmup ramps to). `world_size`: the ranks it runs on (default:
    its own). The cell runner logs it as the metric `lr_effective`."""
    if not hasattr(cfg, "lr"):
        return None
    world_size = getattr(cfg, "world_size", 1) if world_size is None else world_size
    lr = cfg.lr * getattr(cfg, "lr_factor", 1.0)
    base_batch = getattr(cfg, "lr_base_batch", 0)
    if base_batch:
        rank_batch = cfg.batch_size // world_size if getattr(cfg, "batch_is_global", False) else cfg.batch_size
        lr = lr * (rank_batch * world_size) / base_batch
    if getattr(cfg, "lr_scaling", "none") != "none":
        lr = lr * world_size
    return lr


def make_optimizer(cfg: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def train_epochs(model: nn.Module, optimizer: torch.optim.Optimizer, data: Split, *, epochs: int,
                 batch_size: int, device: torch.device, generator: torch.Generator,
                 on_epoch: EpochCallback | None = None, first_epoch: int = 0,
                 precision: "Precision | None" = None, watch: "AccuracyWatch | None" = None,
                 memory_format: torch.memory_format = torch.preserve_format,
                 beat: Callable[[], None] | None = None, loss_fn: nn.Module | None = None,
                 select: BatchSelection | None = None, after_step: Sequence[Callable[[], None]] = ()) -> list[float]:
    """Train `epochs` epochs; return each epoch's seconds. `on_epoch(i, metrics)` runs off the clock.
    `precision` (harness.training.precision) puts autocast around forward and loss and a gradient scaler
    around backward and step; None is the plain fp32 step. `watch` (harness.training.time_to_accuracy)
    evaluates the model at its checkpoints with the clock stopped, and may end training at one
    (the last epoch's seconds are then those trained). `memory_format=torch.channels_last` puts
    each batch in NHWC as it is copied to the device. `beat` is called after every step: a torchrun
    rank's heartbeat (RankContext.beat, throttled), without which its launcher takes a rank whose
    epoch outlasts dist_timeout_s for a hung one and kills it.

    The recipe's training methods hook in here, inside the clock (harness/training/speed_methods.py):
    `loss_fn` (default the book's cross-entropy), `select(x, y)` the part of each batch its step trains
    on (selective backprop; the epoch's samples still count whole, `train_loss` is the mean over the
    samples stepped on), and `after_step`, called after every optimizer step (an lr schedule's step,
    a weight average's update)."""
    loss_fn = nn.CrossEntropyLoss() if loss_fn is None else loss_fn
    model.train()
    to_device = DeviceBatches(device)
    times = []
    steps = -(-len(data) // batch_size)
    bounds = watch.bounds(steps) if watch is not None else [steps]   # steps done at each checkpoint
    for epoch in range(first_epoch, first_epoch + epochs):
        # Summed on the device and read once per epoch: a per-batch .item() would synchronize.
        loss_sum = torch.zeros((), device=device)
        seconds, done, seen, stepped, metrics = 0.0, 0, 0, 0, {}
        order = shuffled_indices(len(data), batch_size, generator)
        for bound in bounds:
            before = seen
            with timed(device) as clock:
                for idx in itertools.islice(order, bound - done):
                    x, y = to_device(data, idx)
                    seen += len(y)
                    x = laid_out(x, memory_format)
                    if select is not None:
                        x, y = select(x, y)
                        x = laid_out(x, memory_format)   # indexing a batch may give it back in NCHW
                    loss_sum += train_step(model, optimizer, loss_fn, x, y, precision) * len(y)
                    stepped += len(y)
                    for hook in after_step:
                        hook()
                    if beat is not None:
                        beat()
            seconds += clock.seconds
            done = bound
            if watch is not None:
                metrics["epoch_test_accuracy"] = watch.check(epochs=epoch - first_epoch + bound / steps,
                                                             seconds=clock.seconds, samples=seen - before)
                model.train()
                if watch.should_stop:
                    break
        times.append(seconds)
        if on_epoch is not None:
            on_epoch(epoch, {"epoch_time_s": seconds, "train_loss": loss_sum.item() / max(stepped, 1), **metrics})
        if watch is not None and watch.should_stop:
            break
    return times


def laid_out(x: torch.Tensor, memory_format: torch.memory_format) -> torch.Tensor:
    """The batch in `memory_format` (preserve_format: as it is)."""
    if memory_format is torch.preserve_format:
        return x
    return x.contiguous(memory_format=memory_format)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn, x: torch.Tensor, y: torch.Tensor,
               precision: "Precision | None" = None) -> torch.Tensor:
    """One optimizer step on a batch; returns its loss, detached (on the device: no synchronization).
    `precision` None is the plain fp32 step."""
    optimizer.zero_grad(set_to_none=True)
    if precision is None:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    else:
        with precision.autocast():
            loss = loss_fn(model(x), y)
        precision.backward_step(loss, optimizer)
    return loss.detach()


@torch.no_grad()
def evaluate(model: nn.Module, data: Split, *, batch_size: int, device: torch.device) -> float:
    """Accuracy (a fraction) on the whole split."""
    model.eval()
    correct = 0
    for x, y in batches(data, batch_size, shuffle=False):
        correct += (model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item()
    model.train()
    return correct / len(data)


def training_metrics(epoch_times: list[float], warmup_times: list[float], *, train_samples: int,
                     test_samples: int, accuracy: float, eval_seconds: float,
                     samples_trained: int | None = None, train_time: float | None = None) -> dict[str, float]:
    """The metrics every training experiment logs under the same names (catalogue.TRAINING_METRICS,
    in that order; the DDP target's merge and dp_scratch build theirs with it too): the sum of the
    timed epochs, their median and IQR, throughput, accuracy, and the untimed parts.
    `samples_trained` (default: every epoch whole) is less when training stopped at a target inside
    an epoch. `train_time` (default: the epochs summed) is the slowest rank's on ranks, whose epochs
    here are the slowest rank's of each epoch."""
    train_time = sum(epoch_times) if train_time is None else train_time
    epochs = spread(epoch_times)
    if samples_trained is None:
        samples_trained = train_samples * len(epoch_times)
    return {
        "train_time_s": train_time,
        "test_accuracy": accuracy,
        "samples_per_s": samples_trained / train_time,
        "epoch_time_median_s": epochs["median"],
        "epoch_time_iqr_s": epochs["iqr"],
        "epoch_time_mean_s": sum(epoch_times) / len(epoch_times),   # d2l's seconds per epoch (Timer.avg())
        "warmup_time_s": sum(warmup_times),
        "eval_time_s": eval_seconds,
        "train_samples": train_samples,
        "test_samples": test_samples,
    }
