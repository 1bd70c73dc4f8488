"""T9.1, T9.2/T9.3, T10.2, D12.6: train with threads, with several processes, or on several GPUs.

world_size 1 on a CPU trains in this process with `threads` threads. world_size N starts N ranks
with torchrun (DistributedDataParallel, DistributedSampler + set_epoch, backend from the config),
each pinned to its own cores or GPU; the ranks' result comes back here and is logged as this one
cell. On GPUs world_size 1 runs under torchrun too, as one rank: the sweep process then never holds
a CUDA context or cached GPU memory that rank 0 of a later cell would share (or, with the GPU in
EXCLUSIVE_PROCESS mode, be refused), and one GPU is timed in the same setting as several.

`batch_size` is per rank (the book) unless `batch_is_global = true` (d2l: split over the devices).
`lr_scaling = linear` multiplies lr by world_size; `linear_warmup` ramps to it over
`lr_warmup_epochs` (Goyal et al. 2017). T10.2's weights: `pretrained = true` starts EfficientNet-B7
from `EfficientNet_B7_Weights.DEFAULT`, as the book, taken from the torch hub cache
(~/.cache/torch/hub/checkpoints) or downloaded there once before any rank starts; where it cannot be
had the cell is a skip saying where to put it, never a run from random weights. How the ranks are
launched, placed, timed (the slowest rank's sum) and killed on a hang, and when a cell is a skip:
docs/MEASUREMENT.md, "Distributed cells".

    harness run data_parallel --set dataset=digits --set epochs=2 --set world_size=2 --set threads=1
"""

from __future__ import annotations

from experiments.descriptors.data_parallel import DataParallelConfig
from harness.distributed import ddp_train
from harness.distributed.launch import launch
from harness.distributed.placement import check_can_run, threads_per_rank
from harness.training.flops import flop_metrics, peak_devices
from harness.training.models import fetch_weights
from harness.distributed.rank import RankContext
from harness.training.train import EpochCallback, prepare

__all__ = ["DataParallelConfig", "run", "to_metrics"]

TARGET = "harness.distributed.ddp_train:train"


def run(cfg: DataParallelConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    check_can_run(cfg)
    if cfg.pretrained:
        fetch_weights(cfg.model)  # here, once, before any rank starts: a skip with the reason if it cannot be had
    if cfg.world_size == 1 and cfg.nnodes == 1 and not cfg.device.startswith("cuda"):
        result = ddp_train.train(cfg, RankContext(device=prepare(cfg)))
    else:
        result = launch(cfg, TARGET)
    metrics = to_metrics(result, on_epoch)
    samples = result["train_samples"] * len(result["epoch_times"])
    in_process = cfg.world_size == 1 and cfg.nnodes == 1
    metrics.update(flop_metrics(result["flops_per_sample"], samples=samples, train_time_s=result["train_time_s"],
                                device=cfg.device, devices=peak_devices(cfg.device.partition(":")[0], cfg.world_size),
                                threads=None if in_process else threads_per_rank(cfg)))
    return metrics


def to_metrics(result: dict, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    """The numbers as metrics; the per-epoch lists go to the epoch callback (MLflow steps)."""
    if on_epoch is not None:
        accuracies = result.get("epoch_accuracies", [])
        for i, (seconds, loss) in enumerate(zip(result["epoch_times"], result["epoch_losses"])):
            on_epoch(i, {"epoch_time_s": seconds, "train_loss": loss,
                         **({"epoch_test_accuracy": accuracies[i]} if i < len(accuracies) else {})})
    return {k: float(v) for k, v in result.items() if isinstance(v, (int, float))}
