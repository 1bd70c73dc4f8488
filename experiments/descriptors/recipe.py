"""Which stack of speed methods brings the book's loop to a target accuracy fastest?

The card of experiment `recipe` (speed recipes; searched by sweeps/study_speed_recipe.toml); its code is
experiments/recipe.py.
- Fields: `RecipeConfig` below: the book's loop (data splits, optimizer, a target accuracy, the
  ranks), autocast, and the groups only this experiment reads, here: `SpeedMethodsFields` (pruning at
  initialisation, channels-last, compilation, the lr tuned and scaled with the batch) and
  `TrainingMethodsFields` (`LrScheduleFields`: a one-cycle lr; `SelectiveBackpropFields`; BatchNorm,
  label smoothing, a weight average). What each changes besides speed: catalogue.SPEED_METHODS.
- Procedure: apply the methods, train from the first step (no warm-up epoch: compilation is inside
  the clock), check the accuracy off the clock `evals_per_epoch` times an epoch, stop at the target.
- Metrics: the shared training metrics with time to accuracy, `samples_trained`, `lr_effective`,
  parameter counts before and after pruning, `selected_steps`, each rank's time, FLOPs and MFU.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from experiments import DDP_BACKENDS, Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES, RANK_METRICS, TRAINING_METRICS
from harness.fields.config import FieldGroup, RunConfig
from harness.fields.field_groups import (AutocastFields, ChannelsLastFields, CompilationFields, EvalBatchFields,
                                         GlobalBatchFields, LearningRateFields, ModelFields, OptimizerFields,
                                         PruningFields, SplitsFields, TargetFields)


CLOCK = ("training only, from the first step (no warm-up epoch): batching from memory, host-to-device copy, "
         "forward, loss, backward (with DDP's allreduce when world_size > 1), optimizer step, the methods' "
         "work at each step (selective backprop's scoring pass, the lr schedule's step, the weight average's "
         "update), and torch.compile's compilation during the first steps; model building, pruning at initialisation, "
         "process start, data loading and every evaluation are outside the clock; several ranks: the slowest")


# The field groups only this experiment reads (harness/fields/field_groups.py holds the shared ones).
class SpeedMethodsFields(ModelFields, ChannelsLastFields, CompilationFields, PruningFields, LearningRateFields):
    """What `speed_methods.check` and its transforms read."""

    lr_base_batch: int = Field(
        0, ge=0, description="Recipe: lr is the rate for a global batch of this size and scales linearly "
        "with the global batch (0 = lr as given).")
    lr_factor: float = Field(
        1.0, gt=0, description="Recipe: lr is multiplied by this factor before the batch scaling (a tuned "
        "learning rate, as the speed-recipe study searches it; 1 = the configured lr).")


class LrScheduleFields(FieldGroup):
    """What `speed_methods.one_cycle` reads: how the lr moves over the steps of a planned number of epochs."""

    lr_schedule: Literal["constant", "one_cycle"] = Field(
        "constant", description="Recipe: constant: the effective lr at every step (the book); one_cycle: a linear "
        "rise to the effective lr (the peak) over lr_warmup_fraction of the steps of schedule_epochs epochs, then a "
        "linear fall to 0 at their end (held there after), stepped every optimizer step.")
    schedule_epochs: float = Field(
        0.0, ge=0, description="Recipe: the epochs a one_cycle schedule is planned over, fixed in advance whatever "
        "stop_at_target ends (at least 1 with one_cycle; 0 with constant).")
    lr_warmup_fraction: float = Field(
        0.2, description="Recipe: the share of one_cycle's planned steps spent rising to the peak lr, in [0, 1) "
        "(0.2 as airbench's baseline rung; read only with one_cycle).")

    @field_validator("lr_warmup_fraction")
    @classmethod
    def _warmup_within_the_cycle(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError("must be in [0, 1): the share of the cycle's steps spent rising to the peak")
        return value

    @model_validator(mode="after")
    def _schedule_planned_once(self):
        if self.lr_schedule == "one_cycle" and self.schedule_epochs < 1:
            raise ValueError(f"lr_schedule one_cycle needs schedule_epochs of at least 1 "
                             f"(got {self.schedule_epochs:g}): the epochs its cycle is planned over")
        # an unread knob is a mistake, not a silent no-op (and would give the same training a second cell id)
        defaults = type(self).model_fields
        if self.lr_schedule == "constant" and (self.schedule_epochs != defaults["schedule_epochs"].default
                                               or self.lr_warmup_fraction != defaults["lr_warmup_fraction"].default):
            raise ValueError("schedule_epochs and lr_warmup_fraction shape a one_cycle schedule; "
                             "set lr_schedule=one_cycle or leave them out")
        return self


class SelectiveBackpropFields(FieldGroup):
    """What `speed_methods.SelectiveBackprop` reads: MosaicML Composer's selective backprop, its defaults
    Composer's (composer/algorithms/selective_backprop)."""

    selective_backprop_keep: float = Field(
        1.0, description="Recipe: selective backprop (Jiang et al. 2019, as Composer has it): in its window each "
        "batch is first scored by a forward pass without gradients and only this fraction of it, drawn towards the "
        "highest losses, is trained on; in (0, 1] (1 = off: every sample, no scoring pass).")
    selective_backprop_start: float = Field(
        0.5, description="Recipe: selective backprop's window opens at this fraction of the `epochs` budget "
                         "(Composer's 0.5; read only with selective_backprop_keep < 1).")
    selective_backprop_end: float = Field(
        0.9, description="Recipe: selective backprop's window closes at this fraction of the `epochs` budget "
                         "(Composer's 0.9; read only with selective_backprop_keep < 1).")
    selective_backprop_interrupt: int = Field(
        2, ge=0, description="Recipe: in the window every this-many-th batch of an epoch is a plain step on the whole "
        "batch (Composer's 2: every other; 0 = none; read only with selective_backprop_keep < 1).")

    @field_validator("selective_backprop_keep")
    @classmethod
    def _keep_a_fraction(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError("must be in (0, 1]: the fraction of each batch trained on (1 = every sample, off)")
        return value

    @model_validator(mode="after")
    def _window_within_the_budget(self):
        if not 0.0 <= self.selective_backprop_start < self.selective_backprop_end <= 1.0:
            raise ValueError(f"selective backprop's window must satisfy 0 <= selective_backprop_start < "
                             f"selective_backprop_end <= 1 (got {self.selective_backprop_start:g} to "
                             f"{self.selective_backprop_end:g}): fractions of the epochs budget")
        defaults = type(self).model_fields
        shaped = any(getattr(self, name) != defaults[name].default for name in
                     ("selective_backprop_start", "selective_backprop_end", "selective_backprop_interrupt"))
        if self.selective_backprop_keep == 1.0 and shaped:
            raise ValueError("selective_backprop_start, _end and _interrupt shape selective backprop; "
                             "set selective_backprop_keep below 1 or leave them out")
        return self


class TrainingMethodsFields(LrScheduleFields, SelectiveBackpropFields):
    """What the recipe's training methods beyond the book's read (speed_methods: one_cycle, with_batchnorm,
    smoothed_loss, averaged, SelectiveBackprop); each is off by default. What each changes is
    catalogue.SPEED_METHODS."""

    batchnorm: bool = Field(
        False, description="Recipe: a BatchNorm2d after every Conv2d of the model (the book's CNN has none), inserted "
        "before pruning, which then drops each removed filter's BatchNorm channel too; DDP ranks normalise "
        "with their own batch's statistics (no SyncBatchNorm) and share rank 0's running averages.")
    label_smoothing: float = Field(
        0.0, description="Recipe: cross-entropy against targets that spread this much of their weight evenly over "
        "every class (Szegedy et al. 2016); in [0, 1), 0 = the book's loss.")
    ema_decay: float = Field(
        0.0, description="Recipe: keep an exponential moving average of the weights (and BatchNorm statistics), "
        "updated after every optimizer step inside the clock, and evaluate it instead of the trained weights (every "
        "accuracy check and the final test accuracy); in [0, 1), 0 = off, 0.99 averages over about 100 steps.")

    @field_validator("label_smoothing")
    @classmethod
    def _smoothing_range(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError("must be in [0, 1): 0 is the plain cross-entropy, 0.1 moves a tenth of each "
                             "target onto the other classes")
        return value

    @field_validator("ema_decay")
    @classmethod
    def _decay_range(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError("must be in [0, 1): 0 keeps no average, 0.99 averages over about 100 steps")
        return value


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
