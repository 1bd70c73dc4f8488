"""How does training scale with threads, with several processes on one CPU, or with several GPUs?

The card of experiment `data_parallel` (the book's T9.1, T9.2/T9.3 and T10.2; d2l 12.6); its code is
experiments/data_parallel.py.
- Fields: `DataParallelConfig` below: the book's loop (data splits, optimizer, timed epochs, a target
  accuracy), the ranks (`LaunchFields`: `world_size`, `backend`, nodes; `batch_is_global`), and the
  groups only this experiment reads, here: `LrScalingFields` (lr scaled by the ranks, with a linear
  warm-up), `PretrainedFields` (the model's published weights) and `DdpTrainingFields`, their sum.
- Procedure: world_size 1 on a CPU trains in this process with `threads` threads; N ranks are started
  by torchrun and trained with DistributedDataParallel, each on its own cores or GPU; the time is the
  slowest rank's.
- Metrics: the shared training metrics, each rank's time (`rank{i}_train_time_s`) and their spread,
  `batch_per_rank`, `final_lr`, `ranks_params_identical`, FLOPs and MFU, time to accuracy.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from experiments import DDP_BACKENDS, Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import (DDP_CLOCK, FLOP_METRICS, FLOP_NOTES, MODELS, RANK_METRICS, TRAINING_METRICS,
                                      models_with_weights)
from harness.fields.config import FieldGroup, RunConfig
from harness.fields.field_groups import (GlobalBatchFields, ModelFields, OptimizerFields, SplitsFields, TargetFields,
                                         TrainingLoopFields)


# The field groups only this experiment reads (harness/fields/field_groups.py holds the shared ones).
class PretrainedFields(ModelFields):
    """The rule reads the model."""

    pretrained: bool = Field(
        False, description="Start from the model's published ImageNet weights (T10.2: EfficientNet_B7_Weights."
        "DEFAULT); a cell whose weights cannot be fetched is skipped, never trained from random ones.")

    @model_validator(mode="after")
    def _model_has_weights(self):
        if self.pretrained:
            if self.model in MODELS and MODELS[self.model].weights is None:
                raise ValueError(f"model {self.model} has no published weights to start from; set pretrained=false "
                                 f"or choose one of {', '.join(models_with_weights())}")
        return self


class LrScalingFields(FieldGroup):
    lr_scaling: Literal["none", "linear", "linear_warmup"] = Field(
        "none", description="none: lr as given (the book); linear: lr x world_size; linear_warmup: lr x "
        "world_size reached by a linear ramp over lr_warmup_epochs (Goyal et al. 2017).")
    lr_warmup_epochs: float = Field(5.0, ge=0, description="Epochs of timed training over which linear_warmup "
                                    "ramps the lr from lr to lr x world_size (untimed warm-up epochs are undone).")


class DdpTrainingFields(SplitsFields, OptimizerFields, TargetFields, TrainingLoopFields, GlobalBatchFields,
                        LrScalingFields, PretrainedFields):
    """What `distributed.ddp_train.train` reads (with LaunchFields beside it, for the ranks)."""


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
