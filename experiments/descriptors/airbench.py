"""experiments/airbench.py as the harness reads it without importing torch: `AirbenchConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from experiments import Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.training.catalogue import FLOP_METRICS, FLOP_NOTES
from harness.training.config import RunConfig
from harness.training.field_groups import (AutocastFields, BackendFlagsFields, BatchFields, ChannelsLastFields,
                                           CompilationFields, DataFields, EvalBatchFields, TargetFields)


INPUT_SHAPE = (3, 32, 32)   # the network's pools need 32x32 (digits are resized, grey made RGB)
CLOCK = ("training only, from the whitening initialisation on: augmenting each batch from the in-memory "
         "tensor (translate, flip), forward, summed label-smoothed loss, backward, SGD step, lr schedule, "
         "lookahead, and torch.compile's compilation during the first steps; data loading, model "
         "building, the FLOP count and every evaluation (test-time augmentation included) are outside")


class AirbenchConfig(RunConfig, DataFields, BatchFields, EvalBatchFields, AutocastFields, ChannelsLastFields,
                     CompilationFields, BackendFlagsFields, TargetFields):
    """airbench94: its own network (no `model`), its own optimizer and schedule (no `optimizer` or `lr`)."""

    airbench_rung: int = Field(
        7, ge=0, le=7, description="airbench: the rung of the paper's ablation ladder, each adding one trick: "
        "0 the baseline network, 1 + frozen patch-whitening first conv, 2 + dirac init, 3 + 64x lr for "
        "BatchNorm biases, 4 + whitening bias frozen after 3 epochs, 5 + lookahead (lr 11.5, BatchNorm "
        "momentum 0.6), 6 + multi-crop test-time augmentation, 7 + alternating flip (= airbench94).")
    airbench_epochs: float = Field(
        0.0, ge=0, description="airbench: training epochs, fractional as published (9.9: the tenth epoch "
        "stops at 90% of its steps); 0 = `epochs`. `epochs` must then be its ceiling (the epochs started).")
    airbench_base_width: int = Field(
        64, ge=1, description="airbench: width of the first conv group; the second and third are 4x it "
        "(64/256/256 as published).")

    @model_validator(mode="after")
    def _epochs_started(self):
        if self.airbench_epochs and math.ceil(self.airbench_epochs) != self.epochs:
            raise ValueError(f"airbench_epochs {self.airbench_epochs:g} starts {math.ceil(self.airbench_epochs)} "
                             f"epochs; set epochs = {math.ceil(self.airbench_epochs)} with it (not {self.epochs})")
        return self


EXPERIMENT = Experiment(
    name="airbench",
    title="airbench94: 94% on CIFAR-10 (Jordan 2024), its ablation ladder, time to accuracy and MFU",
    run=RunTarget("experiments.airbench:run"),
    clock=CLOCK,
    needs_dataset=True,
    metrics=("train_time_s", "test_accuracy", "test_accuracy_no_tta", "tta_level", "eval_time_s", "whiten_time_s",
             "steps", "samples_trained", "samples_per_s", "train_samples", "test_samples", "param_count",
             "threads_used", "scaler_skipped_steps", "train_flops", *FLOP_METRICS, *time_to_accuracy.METRICS),
    config=AirbenchConfig,
    sense=TRAINING_SENSE,
    input_shape=INPUT_SHAPE,
    notes=FLOP_NOTES,
    smoke={"dataset": "digits", "epochs": 2, "batch_size": 128, "airbench_base_width": 8, "dtype": "bf16",
           "channels_last": True, "target_accuracy": 0.3, "evals_per_epoch": 2, "eval_batch_size": 512,
           "execution": "compile", "compile_backend": "eager", "threads": 1},
)
