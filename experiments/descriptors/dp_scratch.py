"""experiments/dp_scratch.py as the harness reads it without importing torch: `DpScratchConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from experiments import DDP_BACKENDS, Experiment, RunTarget, TRAINING_SENSE
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES, TRAINING_METRICS
from harness.fields.config import RunConfig
from harness.fields.field_groups import (BatchFields, EpochsFields, LaunchFields, LearningRateFields, SplitsFields,
                                           WarmupEpochsFields)


class DpScratchConfig(RunConfig, SplitsFields, LaunchFields, EpochsFields, WarmupEpochsFields, BatchFields,
                      LearningRateFields):
    """Plain SGD written out: the lr only (no optimizer, momentum or weight decay)."""

    dp_impl: Literal["ddp", "scratch"] = Field(
        "ddp", description="D12.5: ddp (DistributedDataParallel over world_size processes) or scratch "
        "(one process, world_size parameter copies, hand-written allreduce).")


EXPERIMENT = Experiment(
    name="dp_scratch",
    title="D12.5: hand-written data parallel (copies, split batch, allreduce) vs DDP vs one device",
    run=RunTarget("experiments.dp_scratch:run"),
    clock=("training epochs only, every device synchronized at both ends: splitting each global batch, "
         "copying the shards to the devices (from pageable memory, so synchronous, as d2l), per-copy "
         "forward/backward, the gradient allreduce (hand-written or DDP's), the SGD step on every copy; "
         "the one-device reference run, the comparison and evaluation are outside the clock"),
    needs_dataset=True,
    notes=FLOP_NOTES,
    metrics=(*TRAINING_METRICS, "first_step_param_diff", "params_match", "max_param_diff", "copies_identical",
             "copies", "rank{i}_train_time_s", *FLOP_METRICS),
    backends=DDP_BACKENDS,
    config=DpScratchConfig,
    sense=TRAINING_SENSE,
    # d2l's LeNet (the model is checked)
    models=("lenet_d2l",),
    smoke={"model": "lenet_d2l", "dataset": "digits", "train_limit": 256, "test_limit": 128, "warmup_epochs": 0,
           "epochs": 1, "batch_size": 32, "lr": 0.1, "world_size": 2, "dp_impl": "scratch", "threads": 1},
)
