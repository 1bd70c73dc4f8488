"""experiments/amp.py as the harness reads it without importing torch: `AmpConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

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
