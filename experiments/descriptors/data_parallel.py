"""experiments/data_parallel.py as the harness reads it without importing torch: `DataParallelConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

from __future__ import annotations

from experiments import DDP_BACKENDS, Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import DDP_CLOCK, FLOP_METRICS, FLOP_NOTES, RANK_METRICS, TRAINING_METRICS
from harness.fields.config import RunConfig
from harness.fields.field_groups import DdpTrainingFields


class DataParallelConfig(RunConfig, DdpTrainingFields):
    """The book's loop as torchrun ranks (`distributed.ddp_train.train`), or in this process."""


EXPERIMENT = Experiment(
    name="data_parallel",
    title="T9.1-T10.2, D12.6: threads, or DDP over world_size torchrun processes / GPUs",
    run=RunTarget("experiments.data_parallel:run"),
    clock=DDP_CLOCK,
    needs_dataset=True,
    notes=FLOP_NOTES,
    metrics=(*TRAINING_METRICS, *RANK_METRICS, "batch_per_rank", "final_lr", "ranks_params_identical",
             "rank_time_spread_s", "rank{i}_train_time_s", *FLOP_METRICS, *time_to_accuracy.METRICS),
    backends=DDP_BACKENDS,
    config=DataParallelConfig,
    sense=TRAINING_SENSE,
    models=("cnn", "tiny_cnn", "resnet18_d2l", "efficientnet_b0", "efficientnet_b7", "lenet_d2l"),  # image models
    smoke={"model": "tiny_cnn", "dataset": "digits", "train_limit": 256, "test_limit": 128, "warmup_epochs": 1,
           "epochs": 1, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "lr_scaling": "linear_warmup",
           "lr_warmup_epochs": 1, "world_size": 1, "threads": 1, "target_accuracy": 0.05, "eval_every_epoch": True},
)
