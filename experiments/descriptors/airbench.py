"""How fast does airbench94, the fastest published CIFAR-10 training, reach 94% here, and what does
each rung of its ablation ladder add?

The card of experiment `airbench` (Jordan 2024, arXiv 2404.00498); its code is experiments/airbench.py.
- Fields: `AirbenchConfig` below: its own network and optimizer (no `model`, `optimizer` or `lr`),
  `airbench_rung` (0 the baseline network .. 7 airbench94), `airbench_epochs` (fractional, as
  published), the widths, and what a small CPU may change (test-time augmentation, whitening patch,
  lr and decay scales, fp32 layers under autocast); data, batch, autocast, channels-last,
  compilation, backend flags and a target accuracy from the shared groups.
- Procedure: whiten the first conv from the training patches, train with translate-and-flip batches
  from memory, Nesterov SGD, label smoothing, the lr schedule and lookahead; evaluate off the clock,
  with test-time augmentation.
- Metrics: `test_accuracy` and `test_accuracy_no_tta`, `train_time_s`, time to accuracy,
  `whiten_time_s`, `eval_time_s`, `steps`, `samples_per_s`, `train_flops`, FLOPs and MFU.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from experiments import Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES
from harness.fields.config import RunConfig
from harness.fields.field_groups import (AutocastFields, BackendFlagsFields, BatchFields, ChannelsLastFields,
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

    # What a small CPU may want changed in the published recipe (the CPU study's space); the defaults
    # are the recipe as published, so configs that leave them alone keep their cell ids.
    airbench_tta_level: int | None = Field(
        None, ge=0, le=2, description="airbench: test-time augmentation, 0 none, 1 mirror, 2 mirror and "
        "one-pixel translations (six views); unset = the rung's own (2 from rung 6 on).")
    airbench_whiten_kernel: int = Field(
        2, ge=1, le=4, description="airbench: side of the whitening patches of the first conv "
        "(2 as published; its 2 x 3 x k x k filters cost k^2 as much).")
    airbench_lr_scale: float = Field(
        1.0, gt=0, description="airbench: multiplies the rung's lr (11.5 per 1,024 examples as published).")
    airbench_wd_scale: float = Field(
        1.0, ge=0, description="airbench: multiplies the weight decay (0.0153 per 1,024 examples as published).")
    airbench_fp32_layers: Literal["none", "whiten", "head", "whiten+head"] = Field(
        "none", description="airbench: layers computed in fp32 under bf16/fp16 autocast: the whitening conv "
        "(its filters scale by up to 1/sqrt(5e-4); the images are then kept in fp32 too), the linear head, "
        "or both; 'none' as published.")

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
