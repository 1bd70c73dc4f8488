"""Does automatic mixed precision cut training time, and does it cost accuracy?

The card of experiment `amp` (the book's T7, ch. 7); its code is experiments/amp.py.
- Fields: `AmpConfig` below: the book's loop (data splits, optimizer, timed epochs, a target
  accuracy), autocast's `dtype` fp32/bf16/fp16 with `grad_scaler`, and the backend flags the book
  turns on (`cudnn_benchmark`, `allow_tf32`, `reduced_precision_reduction`).
- Procedure: set the flags for the cell, check that the first Linear/Conv of the forward runs in the
  asked dtype (a cell that would time fp32 as bf16 fails), train `epochs` timed with forward and loss
  under torch.autocast (fp16 with a GradScaler), test, restore the flags.
- Metrics: the shared training metrics, `dtype_native` (whether the hardware computes the dtype),
  the scaler's `grad_scale_final` and `scaler_skipped_steps`, the `flag_*` read back, FLOPs and MFU,
  time to accuracy; the note `forward_dtype`.
"""

from __future__ import annotations

from experiments import Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES, TRAINING_CLOCK, TRAINING_METRICS
from harness.fields.config import RunConfig
from harness.fields.field_groups import (AutocastFields, BackendFlagsFields, OptimizerFields, SplitsFields,
                                           TargetFields, TrainingLoopFields)


class AmpConfig(RunConfig, SplitsFields, OptimizerFields, TrainingLoopFields, AutocastFields, BackendFlagsFields,
                TargetFields):
    """T7: the book's loop under autocast, with the backend flags it sets."""


EXPERIMENT = Experiment(
    name="amp",
    title="T7: train with autocast in fp32 | bf16 | fp16 (+ GradScaler), timed, test",
    run=RunTarget("experiments.amp:run"),
    clock=TRAINING_CLOCK,
    needs_dataset=True,
    metrics=(*TRAINING_METRICS, "param_count", "dtype_native", "grad_scaler_used", "grad_scale_final", "scaler_skipped_steps",
             "flag_benchmark", "flag_allow_tf32", "flag_allow_fp16_reduced_precision_reduction",
             "flag_allow_bf16_reduced_precision_reduction", *FLOP_METRICS, *time_to_accuracy.METRICS),
    notes=("forward_dtype", *FLOP_NOTES),
    config=AmpConfig,
    sense=TRAINING_SENSE,
    # Image models with a Linear or Conv2d layer whose autocast dtype can be checked.
    models=("cnn", "tiny_cnn", "resnet18_d2l", "efficientnet_b0", "efficientnet_b7"),
    smoke={"model": "tiny_cnn", "dataset": "digits", "train_limit": 128, "test_limit": 64, "warmup_epochs": 0,
           "epochs": 1, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "dtype": "bf16", "threads": 1,
           "target_accuracy": 0.05, "eval_every_epoch": True, "stop_at_target": True},
)
