"""The one typed configuration every experiment, sweep cell and study trial is run from.

A flat record on purpose: every field becomes an MLflow param under the same name, so the
MLflow compare view lines up grid cells, study trials and single runs of any experiment.
Experiments read the fields they need and leave the rest at their defaults.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import UserError
from harness.suggest import did_you_mean


class RunConfig(BaseModel):
    # allow_inf_nan=False: `lr = inf` or `nan` is refused like any other bad value.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    # --- what to run -------------------------------------------------------------------------
    experiment: str = Field("pruning", description="Experiment module to run (see `harness list`).")
    model: str = Field("cnn", description="Model from the model registry (see `harness list`).")
    pretrained: bool = Field(
        False, description="Start from the model's published ImageNet weights (T10.2: EfficientNet_B7_Weights."
        "DEFAULT); a cell whose weights cannot be fetched is skipped, never trained from random ones.")

    # --- data --------------------------------------------------------------------------------
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

    # --- training ----------------------------------------------------------------------------
    epochs: int = Field(10, description="Timed training epochs.")
    warmup_epochs: int = Field(1, ge=0, description="Untimed epochs before the clock starts, then undone: the model, "
                               "optimizer and random streams are restored, so they change nothing that is trained.")
    batch_size: int = Field(64, description="Training batch size (per process).")
    eval_batch_size: int = Field(1000, description="Batch size for the test-set evaluation.")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimizer for training.")
    lr: float = Field(1e-5, description="Learning rate.")
    weight_decay: float = Field(0.005, ge=0, description="L2 weight decay passed to the optimizer.")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum (ignored by Adam).")

    # --- pruning (T6.1) ----------------------------------------------------------------------
    sparsity: float = Field(0.0, description="Fraction of Conv2d filters removed per layer, in [0, 1).")
    pruning_backend: Literal["nni", "torch-pruning"] = Field(
        "nni", description="nni: L1NormPruner + ModelSpeedup (the book's tool); torch-pruning: DepGraph L1."
    )
    pretrain_epochs: int = Field(
        1, ge=0, description="T6.1: epochs trained before pruning (the book's procedure: train 1 epoch, prune, "
        "train `epochs` timed); kept, untimed, and only where sparsity > 0 (the book's unpruned row has none).")

    # --- single-device speed methods (issue 3: T7 precision, D12.1 compiled vs eager, D12.2 async) ---
    dtype: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="T7: dtype torch.autocast gives the forward and loss (fp32 = no autocast).")
    number_format: Literal["fp64", "fp32", "tf32", "fp16", "bf16"] = Field(
        "fp32", description="Table 7.1: the numeric format whose sign/exponent/mantissa bits are read "
        "(torch.finfo; tf32, which has no torch dtype, measured on an Ampere or newer GPU).")
    grad_scaler: bool = Field(
        True, description="T7: scale the fp16 loss with torch.amp.GradScaler (false = the book's notebook, "
        "which ran fp16 without one); ignored for fp32 and bf16.")
    cudnn_benchmark: bool = Field(False, description="T7: torch.backends.cudnn.benchmark (CUDA only; no effect on CPU).")
    allow_tf32: bool = Field(
        False, description="T7: TF32 for CUDA matmul and cuDNN (cuda.matmul.allow_tf32, cudnn.allow_tf32).")
    reduced_precision_reduction: bool = Field(
        False, description="T7: cuda.matmul.allow_fp16_/allow_bf16_reduced_precision_reduction.")
    execution: Literal["eager", "script", "compile"] = Field(
        "eager", description="D12.1: run the model eager, as torch.jit.script (deprecated) or torch.compile.")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        "default", description="D12.1: torch.compile mode (used only with execution=compile).")
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="D12.1: torch.compile backend; inductor generates C++ on CPU (needs a compiler).")
    forward_calls: int = Field(1000, description="D12.1: forward passes inside one timed measurement.")
    warmup_calls: int = Field(20, ge=0, description="D12.1: untimed forward passes after the first call.")
    matrix_size: int = Field(1000, description="D12.2: side of the random square matrix multiplied by itself.")
    matmul_iterations: int = Field(10, description="D12.2: random-then-matmul iterations inside one measurement.")
    async_pause_s: float = Field(
        0.0, ge=0, description="D12.2: seconds to sleep between the numpy and the torch measurement (the notes' "
        "exercise: time.sleep(5) made torch faster, numpy still busy when torch's clock started).")
    timing_repeats: int = Field(
        5, description="D12.1/D12.2: repeats of a short measurement inside a cell; median and IQR are logged.")

    # --- data parallel (issue 4) ----------------------------------------------------------------
    world_size: int = Field(1, ge=1, description="Training processes in all (ranks). 1 trains in this process; "
                            "more are started by torchrun and trained with DistributedDataParallel.")
    backend: Literal["gloo", "nccl", "mpi", "ccl"] = Field(
        "gloo", description="torch.distributed backend: gloo (CPU), nccl (GPUs), mpi, ccl (Intel oneCCL bindings).")
    batch_is_global: bool = Field(False, description="batch_size is the global batch, split evenly among the "
                                  "ranks (d2l); false: batch_size is each rank's batch (the book).")
    lr_scaling: Literal["none", "linear", "linear_warmup"] = Field(
        "none", description="none: lr as given (the book); linear: lr x world_size; linear_warmup: lr x "
        "world_size reached by a linear ramp over lr_warmup_epochs (Goyal et al. 2017).")
    lr_warmup_epochs: float = Field(5.0, ge=0, description="Epochs of timed training over which linear_warmup "
                                    "ramps the lr from lr to lr x world_size (untimed warm-up epochs are undone).")
    nnodes: int = Field(1, ge=1, description="Machines taking part; world_size ranks are spread evenly over them.")
    node_rank: int = Field(0, ge=0, description="This machine's index among the nnodes machines.")
    rdzv_endpoint: str = Field("", description="host:port where the nnodes machines meet (torchrun "
                               "--rdzv-endpoint); empty with one node: torchrun --standalone.")
    dist_timeout_s: float = Field(300.0, gt=0, description="A rank that makes no progress for this long (hung, "
                                  "or waiting for a dead peer) fails the cell; all its processes are killed.")
    dp_impl: Literal["ddp", "scratch"] = Field(
        "ddp", description="D12.5: ddp (DistributedDataParallel over world_size processes) or scratch "
        "(one process, world_size parameter copies, hand-written allreduce).")
    autopar_case: Literal["two_devices", "compute_copy", "small_ops", "cpu_gpu", "dependencies"] = Field(
        "two_devices", description="D12.3: two_devices (two GPUs queued without synchronizing), compute_copy "
        "(compute overlapped with copies to the host); its exercises: small_ops (2: small products on "
        "several streams of one GPU), cpu_gpu (3: CPU compute beside GPU compute and copies), dependencies "
        "(5: two branches joined every stage, on two streams, checked against one stream).")
    autopar_size: int = Field(4000, ge=1, description="D12.3: side of the square matrices multiplied.")
    autopar_steps: int = Field(50, ge=1, description="D12.3: matrix products per run.")
    autopar_host_memory: Literal["pageable", "pinned", "pageable_then_pinned"] = Field(
        "pageable", description="D12.3: host memory the results are copied into, the same for the copy baseline "
        "and the overlapped run (pageable, or page-locked pinned); pageable_then_pinned is d2l's mix: baseline "
        "y.to('cpu'), overlapped y.to('cpu', non_blocking=True), which torch puts in pinned memory.")
    autopar_copy_stream: Literal["compute", "separate"] = Field(
        "separate", description="D12.3 compute_copy: compute = d2l, all products then all copies on the one "
        "stream; separate = each result copied on a second stream as soon as it is ready.")
    autopar_streams: int = Field(4, ge=1, description="D12.3 exercise 2: streams the small products are spread over.")
    autopar_cpu_size: int = Field(1000, ge=1, description="D12.3 exercise 3: side of the matrices the CPU "
                                  "multiplies (autopar_steps of them) beside the GPU's work.")

    # --- execution ---------------------------------------------------------------------------
    device: str = Field("cpu", description="cpu, cuda or cuda:N.")
    threads: int = Field(0, ge=0, description="Intra-op threads (torch.set_num_threads); 0 = all cores this process may use.")
    seed: int = Field(0, description="Seed for model init, data order and synthetic data.")
    repeat: int = Field(0, ge=0, description="Repeat index of an otherwise identical cell (timing repeats).")

    # --- studies (issue 5) --------------------------------------------------------------------
    eval_every_epoch: bool = Field(
        False, description="Also measure test accuracy after every timed epoch (off the clock), as the "
        "per-epoch metric `epoch_test_accuracy` a study's pruner reads to stop weak trials early.")

    # --- time to accuracy and speed recipes (issue 12) -------------------------------------------
    target_accuracy: float = Field(
        0.0, ge=0, le=1, description="Test accuracy to reach (a fraction; 0 = none). Evaluated off the clock "
        "evals_per_epoch times an epoch; time_to_accuracy_s is the training seconds until it was first met.")
    target_from_epoch: int = Field(
        0, ge=0, description="A baseline's target: this run's own test accuracy after epoch N (0 = use "
        "target_accuracy). The study runs its baseline trial with it and hands the result on.")
    stop_at_target: bool = Field(False, description="Stop training once the target accuracy is met.")
    evals_per_epoch: int = Field(
        1, ge=1, description="Test-set evaluations per epoch while a target is set (off the clock): "
        "the resolution of time_to_accuracy_s.")
    channels_last: bool = Field(
        False, description="Recipe: model weights and input batches in channels-last memory format (NHWC).")
    lr_base_batch: int = Field(
        0, ge=0, description="Recipe: lr is the rate for a global batch of this size and scales linearly "
        "with the global batch (0 = lr as given).")

    # --- airbench94 (Jordan 2024, "94% on CIFAR-10 in 3.29 seconds on a single GPU") ----------------
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

    @field_validator("epochs", "batch_size", "eval_batch_size", "forward_calls", "matrix_size",
                     "matmul_iterations", "timing_repeats")
    @classmethod
    def _positive_int(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be a positive integer")
        return value

    @field_validator("lr")
    @classmethod
    def _positive_lr(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("must be a positive number")
        return value

    @field_validator("sparsity")
    @classmethod
    def _sparsity_range(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError("must be in [0, 1): 0 keeps every filter, 0.5 removes half")
        return value

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        name, _, index = value.partition(":")
        if name not in ("cpu", "cuda") or (index and not index.isdigit()) or (name == "cpu" and index):
            raise ValueError("must be cpu, cuda or cuda:N")
        return value

    @field_validator("experiment")
    @classmethod
    def _known_experiment(cls, value: str) -> str:
        from experiments import REGISTRY  # names only: no experiment module is imported to check one

        return _one_of(value, REGISTRY)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from harness.models import MODELS

        return _one_of(value, MODELS)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        from harness.data import DATASETS

        return _one_of(value, DATASETS)

    @field_validator("rdzv_endpoint")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            host, sep, port = value.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError("must be host:port, like 127.0.0.1:29500")
        return value

    @model_validator(mode="after")
    def _ranks_fit_nodes(self) -> "RunConfig":
        if self.world_size % self.nnodes:
            raise ValueError(f"world_size {self.world_size} must be a multiple of nnodes {self.nnodes} "
                             "(each node runs the same number of ranks)")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be below nnodes {self.nnodes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint (host:port of the rendezvous)")
        if self.target_accuracy and self.target_from_epoch:
            raise ValueError("give target_accuracy or target_from_epoch, not both")
        if self.target_from_epoch > self.epochs:
            raise ValueError(f"target_from_epoch {self.target_from_epoch} is past the last of {self.epochs} epochs")
        if self.stop_at_target and not (self.target_accuracy or self.target_from_epoch):
            raise ValueError("stop_at_target needs a target: set target_accuracy (or target_from_epoch)")
        if self.pretrained:
            from harness.models import MODELS, models_with_weights

            if self.model in MODELS and MODELS[self.model].weights is None:
                raise ValueError(f"model {self.model} has no published weights to start from; set pretrained=false "
                                 f"or choose one of {', '.join(models_with_weights())}")
        if self.airbench_epochs and math.ceil(self.airbench_epochs) != self.epochs:
            raise ValueError(f"airbench_epochs {self.airbench_epochs:g} starts {math.ceil(self.airbench_epochs)} "
                             f"epochs; set epochs = {math.ceil(self.airbench_epochs)} with it (not {self.epochs})")
        if self.batch_is_global and self.batch_size % self.world_size:
            raise ValueError(f"a global batch_size {self.batch_size} must divide evenly among "
                             f"world_size {self.world_size} ranks")
        return self

    # --- identity ------------------------------------------------------------------------------
    def non_default_items(self) -> dict[str, Any]:
        defaults = RunConfig.model_construct()
        return {k: v for k, v in self.model_dump().items() if getattr(defaults, k) != v or k == "experiment"}

    def cell_id(self) -> str:
        """Identifies what is measured: the fields that differ from the defaults, and the version
        of the procedure that measures them.

        Hashing only non-default values keeps the id of an old cell stable when a new field
        (with a default) is added to this class later. A change to what the same fields measure
        bumps MEASUREMENT_PROCEDURE instead, so a resumed sweep re-measures those cells rather
        than reusing records made the old way.
        """
        canonical = json.dumps(self.non_default_items(), sort_keys=True, default=str)
        if MEASUREMENT_PROCEDURE > 1:
            canonical = f"procedure {MEASUREMENT_PROCEDURE}: {canonical}"
        return hashlib.sha1(canonical.encode()).hexdigest()[:16]


# 1: warm-up epochs were trained and kept. 2 (issue 10): warm-up epochs are undone
# (harness/warmup.py), so a cell trains exactly its epochs; T6.1's unpruned row no longer pre-trains.
# 3: convolution FLOPs count groups (a depthwise conv's weight gradient was counted once per
# group), the MFU peak is per thread count from several kernels, and a one-process cell with a
# backend other than gloo on a CPU is a skip: old records' MFU and their duplicate cell are wrong.
MEASUREMENT_PROCEDURE = 3


def _one_of(value: str, known: dict) -> str:
    if value not in known:
        raise ValueError(f"is not known; choose one of {', '.join(sorted(known))}")
    return value


FIELD_NAMES = tuple(RunConfig.model_fields)


def field_help() -> list[tuple[str, str, str]]:
    """(name, default, description) for every config field, for `harness list --fields`."""
    return [(n, repr(f.default), f.description or "") for n, f in RunConfig.model_fields.items()]


def describe_validation_error(err: ValidationError) -> str:
    """One sentence per mistake, naming the field, what it got and what it accepts."""
    sentences = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"]) or "config"
        if item["type"] == "extra_forbidden":
            sentences.append(f"unknown config key '{field}'; {did_you_mean(field, FIELD_NAMES)}"
                             f"known keys: {', '.join(FIELD_NAMES)}.")
            continue
        message = item["msg"].removeprefix("Value error, ")
        if not item["loc"]:  # a rule across fields (model_validator): its message names the fields
            sentences.append(f"config: {message}.")
            continue
        sentences.append(f"config field '{field}' {_lower_first(message)} (got {item.get('input')!r}).")
    return " ".join(sentences)


def _lower_first(text: str) -> str:
    if text.startswith("Input should"):
        return "should" + text[len("Input should"):]
    return text[:1].lower() + text[1:]


def make_config(values: dict[str, Any]) -> RunConfig:
    """Build and validate a config, turning a validation failure into a UserError sentence."""
    try:
        return RunConfig(**values)
    except ValidationError as err:
        raise UserError(describe_validation_error(err)) from None


def check_keys(keys) -> None:
    unknown = [k for k in keys if k not in FIELD_NAMES]
    if unknown:
        raise UserError(f"unknown config key '{unknown[0]}'; {did_you_mean(unknown[0], FIELD_NAMES)}"
                        f"known keys: {', '.join(FIELD_NAMES)}.")


def parse_assignment(text: str) -> tuple[str, Any]:
    """Parse one `--set key=value`. A JSON list value (`sparsity=[0.1,0.5]`) becomes a sweep axis."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set expects key=value, got '{text}'.")
    check_keys([key])
    raw = raw.strip()
    if raw.startswith("["):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise UserError(f"--set {key}: '{raw}' is not a valid list; write it like [0.1,0.5].") from None
    else:
        value = raw
    for item in value if isinstance(value, list) else [value]:
        if not is_finite(item):
            raise UserError(f"--set {key}: {item!r} is not a finite number; give a finite value.")
    return key, value


def is_finite(value: Any) -> bool:
    """False for inf and nan, whether a float or text a number parser would read as one ("inf",
    "-Infinity", "nan"); True for everything else."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return True
    return not isinstance(value, float) or math.isfinite(value)
