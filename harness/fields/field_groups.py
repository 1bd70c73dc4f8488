"""The config fields several experiments share, in small groups; an experiment's config class is
composed of the groups its `run` reads (through the harness helpers it calls) plus fields of its own.

A group holds the fields one harness helper reads: `SplitsFields` what `data.load_splits` is handed,
`OptimizerFields` what `train.make_optimizer` reads, `LaunchFields` what running a cell as torchrun
ranks reads, and so on. Field names, defaults and descriptions are the MLflow params' and the sweep
files' keys, so they never change. A rule across fields sits in the group of the field it limits; a
group whose rule reads a field of another group inherits that group (`TargetFields` is an
`EpochsFields`), so a config composed of any one group has every field its rules read
(tests/test_config.py composes each group alone, here and in the descriptors).

A group that one experiment alone reads lives in that experiment's descriptor
(experiments/descriptors/NAME.py), beside its config class, so the experiment is read in one file:
recipe's speed and training methods, data_parallel's lr scaling, pretrained weights and DDP loop. It
moves here, unchanged, when a second experiment reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness.fields.catalogue import DATASETS, MODELS
from harness.fields.config import FieldGroup, PositiveInt


class ModelFields(FieldGroup):
    model: str = Field("cnn", description="Model from the model registry (see `harness list`).")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        return one_of(value, MODELS)


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


def one_of(value: str, known) -> str:
    if value not in known:
        raise ValueError(f"is not known; choose one of {', '.join(sorted(known))}")
    return value
