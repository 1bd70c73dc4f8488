"""experiments/recipe.py as the harness reads it without importing torch: `RecipeConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

from __future__ import annotations

from experiments import DDP_BACKENDS, Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES, RANK_METRICS, TRAINING_METRICS
from harness.fields.config import RunConfig
from harness.fields.field_groups import (AutocastFields, EvalBatchFields, GlobalBatchFields, OptimizerFields,
                                           SpeedMethodsFields, SplitsFields, TargetFields, TrainingMethodsFields)


CLOCK = ("training only, from the first step (no warm-up epoch): batching from memory, host-to-device copy, "
         "forward, loss, backward (with DDP's allreduce when world_size > 1), optimizer step, the methods' "
         "work at each step (selective backprop's scoring pass, the lr schedule's step, the weight average's "
         "update), and torch.compile's compilation during the first steps; model building, pruning at initialisation, "
         "process start, data loading and every evaluation are outside the clock; several ranks: the slowest")


class RecipeConfig(RunConfig, SplitsFields, SpeedMethodsFields, TrainingMethodsFields, OptimizerFields, AutocastFields,
                   GlobalBatchFields, EvalBatchFields, TargetFields):
    """The book's loop with stacked speed methods, from the first step (no warm-up epochs)."""


EXPERIMENT = Experiment(
    name="recipe",
    title="Speed recipes: the book's loop with stacked speed methods, time to accuracy and MFU",
    run=RunTarget("experiments.recipe:run"),
    clock=CLOCK,
    needs_dataset=True,
    notes=FLOP_NOTES,
    metrics=(*TRAINING_METRICS, *RANK_METRICS, "samples_trained", "lr_effective", "param_count", "param_count_before",
             "scaler_skipped_steps", "selected_steps", *FLOP_METRICS, *time_to_accuracy.METRICS),
    backends=DDP_BACKENDS,
    config=RecipeConfig,
    sense=TRAINING_SENSE,
    smoke={"model": "tiny_cnn", "dataset": "digits", "train_limit": 512, "test_limit": 128, "epochs": 2,
           "batch_size": 64, "lr_base_batch": 32, "optimizer": "adam", "lr": 0.005, "channels_last": True,
           "dtype": "bf16", "sparsity": 0.25, "pruning_backend": "torch-pruning", "execution": "compile",
           "compile_backend": "eager", "target_accuracy": 0.5, "evals_per_epoch": 2, "threads": 1,
           "lr_schedule": "one_cycle", "schedule_epochs": 2, "batchnorm": True, "label_smoothing": 0.1,
           "ema_decay": 0.5, "selective_backprop_keep": 0.5},
)
