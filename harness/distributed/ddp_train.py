"""Data-parallel training on one rank: DistributedDataParallel, DistributedSampler with set_epoch,
the learning-rate scaling rule, the slowest rank's time, and accuracy on the full test set.

The same function runs with world_size 1 in the sweep's own process (no process group, no DDP
wrapper, the sampler hands that one rank every sample), so one worker and N workers differ only in
what data parallelism adds.

Inside the clock (each timed epoch, after a barrier so the ranks start together): taking this
rank's mini-batches from memory, the host-to-device copy (on CUDA from pinned buffers, queued
without waiting), forward, loss, backward with DDP's gradient allreduce, optimizer step. A cell's
time is the slowest rank's sum of timed epochs.

Random streams: every rank builds the model from the same seed (identical initial weights), then
reseeds with seed + rank, so dropout and stochastic-depth masks differ between ranks as they would
with independent samples; with one shared stream every rank would drop the same units.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from harness.fields.catalogue import DDP_CLOCK
from harness.fields.config import RunConfig
from harness.training.data import DeviceBatches, Split, load_splits
from harness.distributed.rank import RankContext
from harness.distributed.slowest_rank import slowest_rank
from harness.errors import UserError
from harness.training.flops import flops_per_sample
from harness.training.models import MODELS, build_model
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.timing import peak_rss_mb, timed
from harness.training.train import evaluate, lr_effective, make_optimizer, training_metrics
from harness.training.warmup import restored

CLOCK = DDP_CLOCK   # harness/fields/catalogue.py, where descriptors read it without torch


class LrSchedule:
    """lr per step: as given (none), times world_size (linear), or ramped linearly from lr to
    lr x world_size over the first lr_warmup_epochs epochs of training (linear_warmup, Goyal et al.)."""

    def __init__(self, cfg: RunConfig, world_size: int, steps_per_epoch: int):
        self.base = cfg.lr
        self.target = lr_effective(cfg, world_size)
        ramp = cfg.lr_warmup_epochs * steps_per_epoch if cfg.lr_scaling == "linear_warmup" else 0
        self.ramp_steps = max(int(ramp), 0)
        self.step = 0

    def next(self) -> float:
        if self.step < self.ramp_steps:
            lr = self.base + (self.target - self.base) * self.step / self.ramp_steps
        else:
            lr = self.target
        self.step += 1
        return lr

    def state_dict(self) -> dict:  # for harness.training.warmup: the ramp starts at the first timed step
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def rank_batch_size(cfg: RunConfig, world_size: int) -> int:
    return cfg.batch_size // world_size if cfg.batch_is_global else cfg.batch_size


def param_digest(model: nn.Module) -> str:
    """A hash of every parameter's bytes: equal digests mean bit-identical parameters."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(cfg: RunConfig, ctx: RankContext) -> dict:
    data = load_splits(cfg.dataset, cfg.data_dir, MODELS[cfg.model].input_shape, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = build_model(cfg.model, data.num_classes, pretrained=cfg.pretrained).to(ctx.device)
    seed_rank(cfg.seed, ctx.rank)  # from here on, each rank its own dropout / stochastic-depth masks
    net = model
    if ctx.distributed:
        net = DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = make_optimizer(cfg, net)
    # The sampler only needs a length: it hands out indices into the in-memory tensors.
    sampler = DistributedSampler(range(len(data.train)), num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=cfg.seed)
    batch = rank_batch_size(cfg, ctx.world_size)
    steps_per_epoch = -(-len(sampler) // batch)
    schedule = LrSchedule(cfg, ctx.world_size, steps_per_epoch)

    epoch = _epoch_runner(ctx, net, optimizer, data.train, sampler, batch, schedule)

    def test_accuracy() -> float:  # rank 0 evaluates, every rank gets the figure
        return ctx.broadcast(evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=ctx.device)
                             if ctx.rank == 0 else None)

    per_sample = flops_per_sample(model, data.train.x[:2].to(ctx.device))
    watch = AccuracyWatch.from_config(cfg, test_accuracy, agree=ctx.broadcast)
    if watch is not None and watch.per_epoch > 1:
        raise UserError("data_parallel checks the test accuracy once per epoch; set evals_per_epoch=1 "
                        "(the recipe experiment checks more often)")
    # Each rank puts back its own model, optimizer, lr step and random streams, no collective needed
    # (harness.training.warmup); the timed epochs then shuffle as epochs 0, 1, ... as they would without it.
    with restored(model, optimizer, schedule):
        warmup = [epoch(i)[0] for i in range(cfg.warmup_epochs)]
    timed_epochs = _timed_epochs(cfg.epochs, epoch, watch, len(sampler))
    my_times = [t for t, _ in timed_epochs]

    with timed(ctx.device) as evaluation:
        accuracy = evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=ctx.device) if ctx.rank == 0 else None
    accuracy = ctx.broadcast(accuracy)
    everyone = ctx.gather({"times": my_times, "losses": [loss for _, loss in timed_epochs],
                           "digest": param_digest(model), "rss": peak_rss_mb(), "warmup": sum(warmup),
                           "checkpoints": [c.seconds for c in watch.checkpoints] if watch else []})
    result = merge(cfg, ctx, everyone, accuracy, evaluation.seconds, len(data.train), len(data.test),
                   batch, schedule.target)
    result["flops_per_sample"] = per_sample
    if watch is not None:
        # The slowest rank's training seconds at each checkpoint, as the cell's time is the slowest rank's.
        result.update(watch.metrics(slowest_rank(everyone).checkpoints))
        result["epoch_accuracies"] = [c.accuracy for c in watch.checkpoints]
    return result


def _epoch_runner(ctx: RankContext, net, optimizer, train: Split, sampler: DistributedSampler, batch: int,
                  schedule: LrSchedule):
    """One epoch of this rank's share, timed from a barrier: (seconds, mean loss)."""
    to_device = DeviceBatches(ctx.device)

    def epoch(index: int, last: bool = False) -> tuple[float, float]:
        sampler.set_epoch(index)  # a new shuffle each epoch, the same on every rank
        loss_sum = torch.zeros((), device=ctx.device)
        ctx.barrier()
        with timed(ctx.device) as clock:
            order = torch.tensor(list(sampler))
            for start in range(0, len(order), batch):
                ctx.fault("first_step")
                idx = order[start:start + batch]
                loss_sum += _step(net, optimizer, *to_device(train, idx), schedule.next())
                ctx.beat()
            if last:
                ctx.fault("end_of_training")
        return clock.seconds, loss_sum.item() / len(order)
    return epoch


def _timed_epochs(epochs: int, epoch, watch: AccuracyWatch | None, samples: int) -> list[tuple[float, float]]:
    """The timed epochs; after each, off the clock, the watch's check (all ranks stop together)."""
    done = []
    for i in range(epochs):
        done.append(epoch(i, last=i == epochs - 1))
        if watch is not None:
            watch.check(epochs=i + 1, seconds=done[-1][0], samples=samples)
            if watch.should_stop:
                break
    return done


def seed_rank(seed: int, rank: int) -> None:
    """Reseed every generator (CPU and each CUDA device) with seed + rank: called after the model is
    built, so weights stay identical across ranks while the random masks of training differ."""
    torch.manual_seed(seed + rank)


def _step(net, optimizer, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach() * len(y)


def launched_rank() -> bool:
    """Whether this is a torchrun rank (a process group is up, even one of a single rank)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def merge(cfg: RunConfig, ctx: RankContext, everyone: list[dict], accuracy: float, eval_seconds: float,
          train_samples: int, test_samples: int, batch: int, final_lr: float) -> dict:
    """One result for the cell: the slowest rank's time, every rank's time, rank 0's accuracy."""
    slowest = slowest_rank(everyone)
    slowest_per_epoch = slowest.epoch_times
    result = {
        **training_metrics(slowest_per_epoch, [slowest.warmup_time_s], train_samples=train_samples,
                           test_samples=test_samples, accuracy=accuracy, eval_seconds=eval_seconds,
                           train_time=slowest.train_time_s),
        "ranks": ctx.world_size,
        "batch_per_rank": batch,
        "global_batch": batch * ctx.world_size,
        "final_lr": final_lr,
        "threads_used": torch.get_num_threads(),
        "ranks_params_identical": float(len({r["digest"] for r in everyone}) == 1),
        # lists and strings are not metrics: the experiment logs them separately
        "epoch_times": slowest_per_epoch,
        "epoch_losses": [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in everyone))],
        "param_digests": [r["digest"] for r in everyone],
    }
    # train_time_s, rank_time_spread_s, rank{i}_train_time_s; peak_rss_mb from the ranks' own processes
    # (in the sweep's own process the sweep engine measures the peak itself)
    result.update(slowest.metrics(each_rank=True, spread=True, memory=launched_rank()))
    return result
