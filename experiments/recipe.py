"""Speed recipes: the book's training loop with any combination of the speed methods, measured by
time to a target accuracy, throughput and MFU. With every method off it is the book's own loop
(the T6.1 CNN, Adam, batch 64, fp32, eager, every core), the baseline a recipe study compares with.

    harness run recipe --set dataset=digits --set model=tiny_cnn --set epochs=2 --set target_accuracy=0.8 \\
        --set channels_last=true --set batch_size=128 --set lr_base_batch=64 --set dtype=bf16

Methods (config fields, harness/training/speed_methods.py): `sparsity` (Conv2d filters pruned at
initialisation), `channels_last`, `execution=compile` with `compile_mode`, autocast `dtype`,
`batch_size` with `lr_base_batch` (linear lr scaling), `lr_factor` (a tuned lr), `threads`, and the
DDP layout `world_size` ranks x `threads` each over this machine's cores; `malloc`, every
experiment's field, is one more (harness/training/allocator.py). Beyond the book's: `lr_schedule=one_cycle`
over `schedule_epochs` (a rise to the effective lr and a fall to 0, every step), `batchnorm` (a BatchNorm2d
after every Conv2d), `label_smoothing`, `ema_decay` (every evaluation reads an exponential moving average
of the weights) and Composer's selective backprop (`selective_backprop_keep` < 1). What each changes
besides speed: harness/fields/catalogue.py's SPEED_METHODS. A combination that cannot run here is a
skipped cell with the reason.

There is no warm-up epoch: time to accuracy counts every step from initialisation, torch.compile's
compilation in the first steps included. The test set is evaluated `evals_per_epoch` times an
epoch with the clock stopped; `stop_at_target` ends training at the first check that meets it.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel

from experiments.descriptors.recipe import RecipeConfig
from harness.training import accuracy_probe, speed_methods
from harness.fields.config import RunConfig
from harness.training.data import Split, load_splits
from harness.distributed.launch import launch
from harness.distributed.placement import check_can_run, threads_per_rank
from harness.distributed.rank import RankContext
from harness.distributed.slowest_rank import slowest_rank
from harness.training.flops import flop_metrics, flops_per_sample, peak_devices
from harness.training.models import MODELS, build_model, count_parameters
from harness.training.precision import Precision
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.timing import peak_rss_mb, timed
from harness.training.train import EpochCallback, evaluate, lr_effective, make_optimizer, prepare, train_epochs, training_metrics

__all__ = ["RecipeConfig", "run", "train_recipe"]

TARGET = "experiments.recipe:rank_target"


def run(cfg: RecipeConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    speed_methods.check(cfg)
    check_can_run(cfg)
    # A dtype autocast cannot run on this device is a skip here, before any rank is started.
    Precision.for_device(torch.device(cfg.device), cfg.dtype, cfg.grad_scaler)
    if cfg.world_size == 1 and cfg.nnodes == 1:
        result = train_recipe(cfg, RankContext(device=prepare(cfg)), on_epoch)
    else:
        result = launch(cfg, TARGET)
        if on_epoch is not None:  # the ranks' epochs, logged here as MLflow steps after the fact
            for i, metrics in enumerate(result["epoch_records"]):
                on_epoch(i, metrics)
    metrics = {k: float(v) for k, v in result.items() if isinstance(v, (int, float))}
    in_process = cfg.world_size == 1 and cfg.nnodes == 1
    metrics.update(flop_metrics(result["flops_per_sample"], samples=result["samples_trained"],
                                train_time_s=result["train_time_s"], device=cfg.device, dtype=cfg.dtype,
                                devices=peak_devices(cfg.device.partition(":")[0], cfg.world_size),
                                threads=None if in_process else threads_per_rank(cfg)))
    return metrics


def rank_target(cfg: RunConfig, ctx: RankContext) -> dict:
    """What each torchrun rank runs (harness.distributed.worker)."""
    return train_recipe(cfg, ctx)


def train_recipe(cfg: RunConfig, ctx: RankContext, on_epoch: EpochCallback | None = None) -> dict:
    """Build the model with the recipe's methods, train it on this rank's share of the data until
    the epochs are done (or the target is met, with stop_at_target) and return one result, the
    same on every rank: the slowest rank's times, rank 0's accuracies."""
    device = ctx.device
    precision = Precision.for_device(device, cfg.dtype, cfg.grad_scaler)
    data = load_splits(cfg.dataset, cfg.data_dir, MODELS[cfg.model].input_shape, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    model = build_model(cfg.model, data.num_classes)
    if cfg.batchnorm:
        model = speed_methods.with_batchnorm(model)
    param_count_before = count_parameters(model)
    model = speed_methods.prune_at_init(model, cfg.sparsity, data.train.x[:cfg.batch_size], cfg.pruning_backend)
    if cfg.batchnorm:
        model = speed_methods.forget_batchnorm_statistics(model)
    model = model.to(device)
    layout = torch.channels_last if cfg.channels_last else torch.preserve_format
    if cfg.channels_last:
        model = speed_methods.to_channels_last(model)
    per_sample = flops_per_sample(model, data.train.x[:2].to(device, memory_format=layout), cfg.dtype)
    ema = speed_methods.averaged(model, cfg.ema_decay) if cfg.ema_decay else None
    evaluated = ema.module if ema is not None else model

    net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
        if ctx.distributed else model
    if cfg.execution == "compile":
        net = speed_methods.compiled(net, cfg.compile_mode, cfg.compile_backend)
    batch = cfg.batch_size // ctx.world_size if cfg.batch_is_global else cfg.batch_size
    lr = lr_effective(cfg, ctx.world_size)
    optimizer = make_optimizer(cfg.model_copy(update={"lr": lr}), net)

    # rank 0 evaluates the plain model, or its weight average (fp32, no compile); every rank gets the accuracy
    def accuracy_on(split: Split):
        return lambda: ctx.broadcast(evaluate(evaluated, split, batch_size=cfg.eval_batch_size, device=device)
                                     if ctx.rank == 0 else None)

    probe = accuracy_probe.stratified_indices(data.test.y, cfg.probe_size)
    test_accuracy = accuracy_on(data.test)
    watch = AccuracyWatch.from_config(cfg, test_accuracy, accuracy_on(Split(data.test.x[probe], data.test.y[probe])),
                                      agree=ctx.broadcast)
    records: list[dict] = []

    def record(epoch: int, metrics: dict) -> None:
        records.append(dict(metrics))
        if on_epoch is not None:
            on_epoch(epoch, metrics)

    mine = shard(data.train, ctx.rank, ctx.world_size, cfg.seed)
    steps_per_epoch = -(-len(mine) // batch)
    loss = speed_methods.smoothed_loss(cfg.label_smoothing)
    select = selection(cfg, net, precision, steps_per_epoch, ctx.rank)
    ctx.barrier()  # the ranks start their clocks together
    times = train_epochs(net, optimizer, mine, epochs=cfg.epochs,
                         batch_size=batch, device=device, generator=torch.Generator().manual_seed(cfg.seed + ctx.rank),
                         on_epoch=record, precision=precision, watch=watch, memory_format=layout, beat=ctx.beat,
                         loss_fn=loss, select=select, after_step=per_step(cfg, optimizer, model, ema, steps_per_epoch))
    with timed(device) as evaluation:
        accuracy = test_accuracy()

    trained = watch.checkpoints[-1].samples if watch is not None else len(mine) * len(times)
    everyone = ctx.gather({"times": times, "samples": trained, "rss": peak_rss_mb(),
                           "checkpoints": [c.seconds for c in watch.checkpoints] if watch else []})
    slowest = slowest_rank(everyone)
    samples = sum(r["samples"] for r in everyone)
    result = training_metrics(slowest.epoch_times, [], train_samples=len(data.train), test_samples=len(data.test),
                              accuracy=accuracy, eval_seconds=evaluation.seconds, samples_trained=samples)
    # train_time_s: the slowest rank's, as a DDP cell's; peak_rss_mb from the ranks' own processes (in one
    # process the cell runner measures the peak itself)
    result.update(slowest.metrics(memory=ctx.distributed))
    result["samples_per_s"] = samples / result["train_time_s"]
    if watch is not None:
        result.update(watch.metrics(slowest.checkpoints))
    for step, seconds in zip(records, slowest.epoch_times):  # the per-epoch steps show the slowest rank too
        step["epoch_time_s"] = seconds
    result.update({
        "flops_per_sample": per_sample, "samples_trained": samples, "lr_effective": lr,
        "global_batch": batch * ctx.world_size, "ranks": ctx.world_size, "threads_used": torch.get_num_threads(),
        "param_count": count_parameters(model), "param_count_before": param_count_before,
        "scaler_skipped_steps": precision.skipped_steps(), "epoch_records": records,
    })
    if select is not None:
        result["selected_steps"] = select.selected
    return result


def per_step(cfg: RunConfig, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
             ema: AveragedModel | None, steps_per_epoch: int) -> list[Callable[[], None]]:
    """What runs after every optimizer step, inside the clock: the one-cycle schedule's step, then the
    weight average's update from the module the optimizer trains (DDP's and compile's wrappers share
    its tensors)."""
    hooks = []
    if cfg.lr_schedule == "one_cycle":
        planned = max(1, round(cfg.schedule_epochs * steps_per_epoch))
        hooks.append(speed_methods.one_cycle(optimizer, planned, cfg.lr_warmup_fraction).step)
    if ema is not None:
        hooks.append(lambda: ema.update_parameters(model))
    return hooks


def selection(cfg: RunConfig, net: torch.nn.Module, precision: Precision, steps_per_epoch: int,
              rank: int) -> speed_methods.SelectiveBackprop | None:
    """Selective backprop on the training model, scored with the training loss, or None when it is off.
    Each rank draws from its own seeded stream; every rank keeps the same number of samples."""
    if cfg.selective_backprop_keep == 1.0:
        return None
    smoothing = cfg.label_smoothing

    def per_sample_loss(logits, y, reduction):
        return torch.nn.functional.cross_entropy(logits, y, reduction=reduction, label_smoothing=smoothing)

    return speed_methods.SelectiveBackprop(
        net, per_sample_loss, keep=cfg.selective_backprop_keep, start=cfg.selective_backprop_start,
        end=cfg.selective_backprop_end, interrupt=cfg.selective_backprop_interrupt, steps_per_epoch=steps_per_epoch,
        epochs=cfg.epochs, autocast=precision.autocast, generator=torch.Generator().manual_seed(cfg.seed + rank))


def shard(split: Split, rank: int, world_size: int, seed: int) -> Split:
    """This rank's share of the training set: equal parts of one fixed permutation (every rank then
    takes the same number of steps, as DDP needs). One rank trains on the whole split as it is."""
    if world_size == 1:
        return split
    per = len(split) // world_size
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))
    keep = order[rank * per:(rank + 1) * per]
    return Split(split.x[keep], split.y[keep])
