"""Does data parallelism written by hand train as DDP and one device do, and how fast is it?

The card of experiment `dp_scratch` (d2l 12.5); its code is experiments/dp_scratch.py.
- Fields: `DpScratchConfig` below: data splits, the ranks (`LaunchFields`), epochs, batch, the lr of
  plain SGD, and `dp_impl`: scratch (world_size parameter copies in one process, a hand-written
  allreduce) or ddp (world_size torchrun ranks).
- Procedure: split each global batch over the copies (or ranks), sum the gradients, take the same
  SGD step everywhere; then compare the parameters with one device trained on the full batches.
- Metrics: the shared training metrics, `max_param_diff` and `params_match` against one device,
  `first_step_param_diff`, `copies_identical`, FLOPs and MFU.
"""

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
