"""D12.5 (d2l 12.5): data parallelism written by hand, beside DistributedDataParallel, each checked
against one device training on the full batch.

- dp_impl=scratch: one process holds world_size copies of LeNet's parameters (one per device: the
  GPUs cuda:0..k-1, or k copies on the CPU when device=cpu, which keeps the arithmetic and runs the
  copies one after the other); each global batch is split across the copies (`split_batch`), each
  copy computes its shard's summed loss and gradients, a hand-written `allreduce` sums the gradients
  and copies the sum back, and every copy takes the same SGD step (lr x gradient / global batch).
- dp_impl=ddp: world_size torchrun ranks, each taking shard r of the same global batches, with the
  same LeNet as an nn.Module under DDP (which averages gradients, so each rank's loss is scaled by
  world_size / global batch to give the same step).

Both then compare their parameters with one device trained on the full batches from the same
initial parameters: `max_param_diff` (float rounding only) and `params_match`.

On GPUs the scratch copies train in a process of their own (torchrun with one process), like the
DDP ranks, so the sweep process never holds a CUDA context or cached memory a later DDP rank 0
would share. Its clock synchronizes every device holding a copy, so the last update on the second
GPU is inside it. Shards are copied to the devices from pageable memory, as d2l does: those copies
are synchronous (the host waits for each), and that waiting is part of the time.

    harness run dp_scratch --set dataset=digits --set epochs=1 --set world_size=2 --set dp_impl=scratch
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from experiments.descriptors.dp_scratch import DpScratchConfig
from harness.training import flops
from harness.fields.config import RunConfig
from harness.training.data import Dataset, Split, load_splits
from harness.distributed.launch import launch
from harness.distributed.placement import check_can_run, threads_per_rank
from harness.distributed.rank import RankContext
from harness.distributed.slowest_rank import slowest_rank
from harness.errors import CellSkipped, UserError
from harness.training.flops import flop_metrics, flops_per_sample, peak_devices
from harness.machine.hardware import gpu_count, slice_note
from harness.training.models import MODELS, TensorLeNet, get_lenet_params as get_params, lenet
from harness.training.timing import peak_rss_mb, timed
from harness.training.train import EpochCallback, prepare, training_metrics
from harness.training.warmup import restored

TARGET = "experiments.dp_scratch:ddp_target"
SCRATCH_TARGET = "experiments.dp_scratch:scratch_target"
MATCH_ATOL = 1e-5


def split_batch(x: torch.Tensor, y: torch.Tensor, parts: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Even shards of one batch in order (what nn.parallel.scatter does), one per device."""
    return list(zip(x.chunk(parts), y.chunk(parts)))


def allreduce(grads: list[torch.Tensor]) -> None:
    """Sum the gradients onto the first copy, then copy the sum back to every copy (d2l 12.5)."""
    for g in grads[1:]:
        grads[0][:] += g.to(grads[0].device)
    for g in grads[1:]:
        g[:] = grads[0].to(g.device)


def global_batches(split: Split, batch_size: int, seed: int, epoch: int):
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        yield split.x[idx], split.y[idx]


def train_copies(cfg: RunConfig, data: Dataset, devices: list[torch.device],
                 on_epoch: EpochCallback | None = None, max_steps: int | None = None,
                 beat: Callable[[], None] | None = None, warmup_epochs: int = 0,
                 ) -> tuple[list[list[torch.Tensor]], list[float], float]:
    """d2l's `train(num_gpus, batch_size, lr)`: one parameter copy per device; returns the copies,
    each timed epoch's seconds and the warm-up's seconds. With one device it is plain full-batch training. `max_steps`
    stops after that many steps (the per-step equality check); `beat` is called after each step
    (a launched rank's heartbeat). `warmup_epochs` untimed epochs come first and are undone
    (harness.training.warmup), so the copies train exactly `cfg.epochs` epochs from the same start."""
    start = get_params(cfg.seed, data.num_classes)
    copies = [[p.to(d, copy=True).requires_grad_() for p in start] for d in devices]  # own memory, even on one CPU
    steps = 0

    def epoch(index: int) -> float | None:
        """One epoch (batch order `index`) on every copy; its seconds, or None once max_steps is reached."""
        nonlocal steps
        with timed(*devices) as clock:  # every copy's device: the last update may be on the last one
            for x, y in global_batches(data.train, cfg.batch_size, cfg.seed, index):
                if max_steps is not None and steps >= max_steps:
                    return None
                steps += 1
                shards = split_batch(x, y, len(devices))
                losses = [F.cross_entropy(lenet(xs.to(d), ps), ys.to(d), reduction="sum")
                          for (xs, ys), d, ps in zip(shards, devices, copies)]
                for loss in losses:  # queued on every device before any result is waited for
                    loss.backward()
                with torch.no_grad():
                    for i in range(len(start)):
                        allreduce([ps[i].grad for ps in copies])
                    for ps in copies:
                        for p in ps:
                            p -= cfg.lr * p.grad / len(y)
                            p.grad.zero_()
                if beat is not None:
                    beat()
        return clock.seconds

    with restored(*(p for ps in copies for p in ps)):
        warmup = [epoch(index) or 0.0 for index in range(warmup_epochs)]
    steps = 0
    times = []
    for index in range(cfg.epochs):
        seconds = epoch(index)
        if seconds is None:
            break
        times.append(seconds)
        if on_epoch is not None:
            on_epoch(index, {"epoch_time_s": seconds})
    return copies, times, sum(warmup)


def max_diff(params: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max((p.detach().cpu() - r.detach().cpu()).abs().max().item() for p, r in zip(params, reference))


def compare(first_step: list[torch.Tensor], final: list[torch.Tensor], cfg: RunConfig, data: Dataset,
            device: torch.device) -> dict[str, float]:
    """d2l's claim is per step: one data-parallel step gives one full-batch step's parameters up to
    float rounding (`params_match`, from `first_step_param_diff`). Over many steps those rounding
    differences are amplified by training, so the end-of-training difference is reported as measured."""
    one_step, _, _ = train_copies(cfg, data, [device], max_steps=1)
    reference, _, _ = train_copies(cfg, data, [device])
    first = max_diff(first_step, one_step[0])
    return {"first_step_param_diff": first, "params_match": float(first <= MATCH_ATOL),
            "max_param_diff": max_diff(final, reference[0])}


@torch.no_grad()
def accuracy(params: list[torch.Tensor], split: Split, device: torch.device) -> float:
    correct = sum((lenet(x.to(device), params).argmax(1) == y.to(device)).sum().item()
                  for x, y in global_batches(split, 1000, 0, 0))
    return correct / len(split)


def _data(cfg: RunConfig) -> Dataset:
    return load_splits(cfg.dataset, cfg.data_dir, MODELS["lenet_d2l"].input_shape, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)


def _devices(cfg: RunConfig) -> list[torch.device]:
    if cfg.device.startswith("cuda"):
        have = gpu_count()
        if have < cfg.world_size:
            raise CellSkipped(f"{cfg.world_size} parameter copies on GPUs need {cfg.world_size} GPUs; "
                              f"this machine has {have}" + slice_note())
        return [torch.device("cuda", i) for i in range(cfg.world_size)]
    return [torch.device("cpu")] * cfg.world_size


def run(cfg: DpScratchConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    if cfg.model != "lenet_d2l":
        raise UserError("dp_scratch trains d2l's plain-tensor LeNet; set model=lenet_d2l.")
    if cfg.batch_size % cfg.world_size:
        raise UserError(f"batch_size {cfg.batch_size} must split evenly over world_size {cfg.world_size}.")
    if cfg.dp_impl == "ddp" and cfg.world_size > 1:
        check_can_run(cfg)
        return _launched(cfg, TARGET, on_epoch)
    if cfg.device.startswith("cuda"):
        prepare(cfg)  # no GPU here: a skip, decided before anything is launched
        _devices(cfg)
        return _launched(cfg, SCRATCH_TARGET, on_epoch, processes=1)
    result = scratch(cfg, on_epoch)
    return {**_numbers(result), **{k: result[k] for k in flops.NOTES if k in result}}


def _launched(cfg: RunConfig, target: str, on_epoch: EpochCallback | None, processes: int | None = None):
    """Run `target` under torchrun; the epoch times it returns become this cell's epoch steps."""
    result = launch(cfg, target, processes=processes)
    if on_epoch is not None:
        for i, seconds in enumerate(result.pop("epoch_times")):
            on_epoch(i, {"epoch_time_s": seconds})
    metrics = {**_numbers(result), **{k: result[k] for k in flops.NOTES if k in result}}
    if "flops_per_sample" not in metrics:  # DDP ranks report times; the FLOPs are counted here
        metrics.update(_flop_metrics(cfg, _data(cfg), metrics["train_time_s"], ranks=True))
    return metrics


def _numbers(result: dict) -> dict[str, float]:
    return {k: float(v) for k, v in result.items() if isinstance(v, (int, float))}


def scratch(cfg: RunConfig, on_epoch: EpochCallback | None = None,
            beat: Callable[[], None] | None = None) -> dict:
    """dp_impl=scratch (or one device) in this process: world_size copies, one per device; the
    metrics and the list of timed epochs' seconds (`epoch_times`)."""
    prepare(cfg)
    devices = _devices(cfg)
    data = _data(cfg)
    copies, times, warmup = train_copies(cfg, data, devices, on_epoch, beat=beat, warmup_epochs=cfg.warmup_epochs)
    first_step, _, _ = train_copies(cfg, data, devices, max_steps=1)
    metrics = compare(first_step[0], copies[0], cfg, data, devices[0])
    # every copy must hold the same parameters after each allreduce + step
    metrics["copies_identical"] = float(all(torch.equal(a.cpu(), b.cpu()) for ps in copies for a, b in zip(ps, copies[0])))
    with timed(devices[0]) as evaluation:
        test_accuracy = accuracy(copies[0], data.test, devices[0])
    return {**metrics, **_summary(cfg, data, times, warmup, test_accuracy, evaluation.seconds),
            **_flop_metrics(cfg, data, sum(times)), "epoch_times": times}


def scratch_target(cfg: RunConfig, ctx: RankContext) -> dict:
    """The scratch copies in a launched process of their own (one rank, every GPU of the cell)."""
    return {**scratch(cfg, beat=ctx.beat), "peak_rss_mb": peak_rss_mb()}


def _flop_metrics(cfg: RunConfig, data: Dataset, train_time_s: float, ranks: bool = False) -> dict[str, float]:
    """LeNet's training FLOPs per sample and the run's MFU over the devices its copies or ranks used:
    torchrun ranks each have their GPU or their own CPU cores; copies in one process on a CPU take
    turns on this process's cores (one peak), on GPUs one device each."""
    model = TensorLeNet(get_params(cfg.seed, data.num_classes))
    on_gpu = cfg.device.startswith("cuda")
    devices = peak_devices(cfg.device.partition(":")[0], cfg.world_size) if ranks or on_gpu else 1
    return flop_metrics(flops_per_sample(model, data.train.x[:2]), samples=len(data.train) * cfg.epochs,
                        train_time_s=train_time_s, device=cfg.device, devices=devices,
                        threads=threads_per_rank(cfg) if ranks else None)


def _summary(cfg: RunConfig, data: Dataset, times: list[float], warmup_s: float, test_accuracy: float,
             eval_s: float) -> dict[str, float]:
    """The training metrics every experiment logs (catalogue.TRAINING_METRICS), and how many copies trained."""
    return {**training_metrics(times, [warmup_s], train_samples=len(data.train), test_samples=len(data.test),
                               accuracy=test_accuracy, eval_seconds=eval_s,
                               samples_trained=len(data.train) * cfg.epochs),
            "copies": cfg.world_size}


def ddp_target(cfg: RunConfig, ctx: RankContext) -> dict:
    """One rank of dp_impl=ddp: shard `rank` of every global batch, DDP's gradient averaging."""
    data = _data(cfg)
    net = DistributedDataParallel(TensorLeNet(get_params(cfg.seed, data.num_classes)).to(ctx.device))
    optimizer = torch.optim.SGD(net.parameters(), lr=cfg.lr)
    first_step = []

    def epoch(index: int) -> float:
        ctx.barrier()
        with timed(ctx.device) as clock:
            for x, y in global_batches(data.train, cfg.batch_size, cfg.seed, index):
                xs, ys = split_batch(x, y, ctx.world_size)[ctx.rank]
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(net(xs.to(ctx.device)), ys.to(ctx.device), reduction="sum")
                (loss * ctx.world_size / len(y)).backward()  # DDP averages: this makes it the full-batch mean
                optimizer.step()
                ctx.beat()
                if not first_step:  # inside the clock once: a copy of ~130k floats, microseconds
                    first_step.extend(p.detach().clone() for p in net.module.params)
        return clock.seconds

    with restored(net.module, optimizer):  # each rank its own; no collective is left open (harness.training.warmup)
        warmup = [epoch(index) for index in range(cfg.warmup_epochs)]
    first_step.clear()  # the warm-up's first step was undone with the rest
    times = [epoch(index) for index in range(cfg.epochs)]
    slowest = slowest_rank(ctx.gather({"times": times, "warmup": sum(warmup)}))
    result = {}
    if ctx.rank == 0:  # the one-device reference, off the clock, compared here where the parameters are
        params = [p.detach() for p in net.module.params]
        with timed(ctx.device) as evaluation:
            test_accuracy = accuracy(params, data.test, ctx.device)
        result = {**compare(first_step, params, cfg, data, ctx.device),
                  **_summary(cfg, data, slowest.epoch_times, slowest.warmup_time_s, test_accuracy, evaluation.seconds)}
        result.update(slowest.metrics(each_rank=True))  # train_time_s: the slowest rank's, and each rank's
        result["epoch_times"] = slowest.epoch_times
    return ctx.broadcast(result)
