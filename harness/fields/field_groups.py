"""The config fields experiments share, in small groups; an experiment's config class is composed of
the groups its `run` reads (through the harness helpers it calls) plus fields of its own.

A group holds the fields one harness helper reads: `SplitsFields` what `data.load_splits` is handed,
`OptimizerFields` what `train.make_optimizer` reads, `LaunchFields` what running a cell as torchrun
ranks reads, and so on. Field names, defaults and descriptions are the MLflow params' and the sweep
files' keys, so they never change. A rule across fields sits in the group of the field it limits; a
group whose rule reads a field of another group inherits that group (`TargetFields` is an
`EpochsFields`), so a config composed of any one group has every field its rules read
(tests/test_config.py composes each group alone).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness.fields.catalogue import DATASETS, MODELS, models_with_weights
from harness.fields.config import FieldGroup, PositiveInt


class ModelFields(FieldGroup):
    model: str = Field("cnn", description="Model from the model registry (see `harness list`).")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        return one_of(value, MODELS)


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


class DataFields(FieldGroup):
    dataset: str = Field(
        "cifar10",
        description="cifar10 | fashion_mnist (torchvision, downloaded when online), imagefolder "
        "(DATA_DIR/train and DATA_DIR/test class folders), imagefolder_grey28 (the same folders in grey at "
        "28x28: CIFAR-10 standing in for Fashion-MNIST), digits (scikit-learn's bundled digits), "
        "synthetic (seeded, learnable).",
    )
    data_dir: str = Field("data", description="Where datasets are read from or downloaded to.")
    train_limit: int = Field(0, ge=0, description="Train on a fixed random subset of N samples (0 = all).")
    test_limit: int = Field(0, ge=0, description="Test on a fixed random subset of N samples (0 = all).")

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        return one_of(value, DATASETS)


class SplitsFields(DataFields, ModelFields):
    """What an experiment hands `data.load_splits` (the model for its input shape)."""


class EpochsFields(FieldGroup):
    epochs: PositiveInt = Field(10, description="Timed training epochs.")


class WarmupEpochsFields(FieldGroup):
    warmup_epochs: int = Field(1, ge=0, description="Untimed epochs before the clock starts, then undone: the model, "
                               "optimizer and random streams are restored, so they change nothing that is trained.")


class BatchFields(FieldGroup):
    batch_size: PositiveInt = Field(64, description="Training batch size (per process).")


class EvalBatchFields(FieldGroup):
    eval_batch_size: PositiveInt = Field(1000, description="Batch size for the test-set evaluation.")


class TrainingLoopFields(EpochsFields, BatchFields, EvalBatchFields, WarmupEpochsFields):
    """The book's loop: timed epochs after undone warm-up epochs, then the test set in batches."""


class LearningRateFields(FieldGroup):
    lr: float = Field(1e-5, description="Learning rate.")

    @field_validator("lr")
    @classmethod
    def _positive_lr(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("must be a positive number")
        return value


class OptimizerFields(LearningRateFields):
    """What `train.make_optimizer` reads (momentum with sgd only)."""

    optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimizer for training.")
    weight_decay: float = Field(0.005, ge=0, description="L2 weight decay passed to the optimizer.")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum (ignored by Adam).")


class TargetFields(EpochsFields):
    """Time to accuracy (`time_to_accuracy.AccuracyWatch`): a target epoch past the last is refused."""

    eval_every_epoch: bool = Field(
        False, description="Also measure test accuracy after every timed epoch (off the clock), as the "
        "per-epoch metric `epoch_test_accuracy` a study's pruner reads to stop weak trials early.")
    target_accuracy: float = Field(
        0.0, ge=0, le=1, description="Test accuracy to reach (a fraction; 0 = none). Evaluated off the clock "
        "evals_per_epoch times an epoch; time_to_accuracy_s is the training seconds until it was first met.")
    target_from_epoch: int = Field(
        0, ge=0, description="A baseline's target: this run's own test accuracy after epoch N (0 = use "
        "target_accuracy). The study runs its baseline trial with it and hands the result on.")
    stop_at_target: bool = Field(False, description="Stop training once the target accuracy is met.")
    give_up_after_s: float = Field(
        0.0, ge=0, description="With target_accuracy: stop training at the first check past this many training "
        "seconds without meeting it (metric gave_up = 1; 0 = train every epoch). A study sets it from its "
        "calibrated reference ([target] give_up_after), so a trial that cannot win does not spend its whole budget.")
    evals_per_epoch: int = Field(
        1, ge=1, description="Test-set evaluations per epoch while a target is set (off the clock): "
        "the resolution of time_to_accuracy_s.")
    check_every_samples: int = Field(
        0, ge=0, description="Check the accuracy every this many training samples instead, in whole steps of the "
        "run's global batch, at least one (off the clock; 0 = evals_per_epoch checks an epoch): a fine clock, the "
        "same share of training whatever the batch, so a search over batch sizes is resolved alike.")
    probe_size: int = Field(
        0, ge=0, description="Test images in the probe each check reads: a fixed, stratified part of the test set "
        "(harness/training/accuracy_probe.py); a check that meets the target on it is confirmed on the whole test set, "
        "and only a confirmed one counts (0 = every check reads the whole test set).")

    @model_validator(mode="after")
    def _one_target_within_the_epochs(self):
        if self.target_accuracy and self.target_from_epoch:
            raise ValueError("give target_accuracy or target_from_epoch, not both")
        if self.target_from_epoch > self.epochs:
            raise ValueError(f"target_from_epoch {self.target_from_epoch} is past the last of {self.epochs} epochs")
        if self.stop_at_target and not (self.target_accuracy or self.target_from_epoch):
            raise ValueError("stop_at_target needs a target: set target_accuracy (or target_from_epoch)")
        if self.give_up_after_s and not self.target_accuracy:
            raise ValueError("give_up_after_s needs target_accuracy: it gives up on reaching that accuracy")
        return self


class AutocastFields(FieldGroup):
    """`precision.Precision`: the autocast dtype and the fp16 loss scaler."""

    dtype: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="T7: dtype torch.autocast gives the forward and loss (fp32 = no autocast).")
    grad_scaler: bool = Field(
        True, description="T7: scale the fp16 loss with torch.amp.GradScaler (false = the book's notebook, "
        "which ran fp16 without one); ignored for fp32 and bf16.")


class BackendFlagsFields(FieldGroup):
    """What `precision.backend_flags` sets for the duration of a cell."""

    cudnn_benchmark: bool = Field(False, description="T7: torch.backends.cudnn.benchmark (CUDA only; no effect on CPU).")
    allow_tf32: bool = Field(
        False, description="T7: TF32 for CUDA matmul and cuDNN (cuda.matmul.allow_tf32, cudnn.allow_tf32).")
    reduced_precision_reduction: bool = Field(
        False, description="T7: cuda.matmul.allow_fp16_/allow_bf16_reduced_precision_reduction.")


class CompilationFields(FieldGroup):
    execution: Literal["eager", "script", "compile"] = Field(
        "eager", description="D12.1: run the model eager, as torch.jit.script (deprecated) or torch.compile.")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        "default", description="D12.1: torch.compile mode (used only with execution=compile).")
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="D12.1: torch.compile backend; inductor generates C++ on CPU (needs a compiler).")


class PruningFields(FieldGroup):
    sparsity: float = Field(0.0, description="Fraction of Conv2d filters removed per layer, in [0, 1).")
    pruning_backend: Literal["nni", "torch-pruning"] = Field(
        "nni", description="nni: L1NormPruner + ModelSpeedup (the book's tool); torch-pruning: DepGraph L1."
    )

    @field_validator("sparsity")
    @classmethod
    def _sparsity_range(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError("must be in [0, 1): 0 keeps every filter, 0.5 removes half")
        return value


class ChannelsLastFields(FieldGroup):
    channels_last: bool = Field(
        False, description="Recipe: model weights and input batches in channels-last memory format (NHWC).")


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


class TimingRepeatsFields(FieldGroup):
    timing_repeats: PositiveInt = Field(
        5, description="D12.1/D12.2: repeats of a short measurement inside a cell; median and IQR are logged.")


class LaunchFields(FieldGroup):
    """Running a cell as torchrun ranks: `placement.check_can_run`, torchrun's arguments, the hang
    watchdog in `distributed.launch`, and `distributed.worker` on each rank."""

    world_size: int = Field(1, ge=1, description="Training processes in all (ranks). 1 trains in this process; "
                            "more are started by torchrun and trained with DistributedDataParallel.")
    backend: Literal["gloo", "nccl", "mpi", "ccl"] = Field(
        "gloo", description="torch.distributed backend: gloo (CPU), nccl (GPUs), mpi, ccl (Intel oneCCL bindings).")
    nnodes: int = Field(1, ge=1, description="Machines taking part; world_size ranks are spread evenly over them.")
    node_rank: int = Field(0, ge=0, description="This machine's index among the nnodes machines.")
    rdzv_endpoint: str = Field("", description="host:port where the nnodes machines meet (torchrun "
                               "--rdzv-endpoint); empty with one node: torchrun --standalone.")
    dist_timeout_s: float = Field(300.0, gt=0, description="A rank that makes no progress for this long (hung, "
                                  "or waiting for a dead peer) fails the cell; all its processes are killed.")

    @field_validator("rdzv_endpoint")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            host, sep, port = value.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError("must be host:port, like 127.0.0.1:29500")
        return value

    @model_validator(mode="after")
    def _ranks_fit_nodes(self):
        if self.world_size % self.nnodes:
            raise ValueError(f"world_size {self.world_size} must be a multiple of nnodes {self.nnodes} "
                             "(each node runs the same number of ranks)")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be below nnodes {self.nnodes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint (host:port of the rendezvous)")
        return self


class GlobalBatchFields(BatchFields, LaunchFields):
    """A global batch must split evenly among the ranks."""

    batch_is_global: bool = Field(False, description="batch_size is the global batch, split evenly among the "
                                  "ranks (d2l); false: batch_size is each rank's batch (the book).")

    @model_validator(mode="after")
    def _batch_splits_among_ranks(self):
        if self.batch_is_global and self.batch_size % self.world_size:
            raise ValueError(f"a global batch_size {self.batch_size} must divide evenly among "
                             f"world_size {self.world_size} ranks")
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


def one_of(value: str, known) -> str:
    if value not in known:
        raise ValueError(f"is not known; choose one of {', '.join(sorted(known))}")
    return value
