"""What the training half offers, by name, readable without importing torch: the models (with the
input each expects and the weights it can start from), the datasets, the metric names and clock
texts the experiments' descriptors cite, and the recipe's speed methods with what each changes besides
speed (SPEED_METHODS, the table their method cards are made from).

The command line checks a sweep's names and values against these before it loads torch, MLflow or
Optuna, so a mistake is answered in a fraction of a second. The code behind each name is the training
half's, in harness/training: the builders in models.py, the loaders in data.py, the clocks in train.py and
harness/distributed/ddp_train.py, the FLOP metrics in flops.py, the speed methods in speed_methods.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    input_shape: tuple[int, ...]  # (channels, height, width) for images, (features,) otherwise
    description: str
    # Outputs of the classifier whatever the dataset (None: one per class). The book builds EfficientNet
    # with torchvision's default 1000-class ImageNet head and lets CIFAR-10's labels 0-9 index into it.
    head_classes: int | None = None
    # torchvision weights the model can start from with pretrained=true ("EfficientNet_B7_Weights.DEFAULT").
    weights: str | None = None


# Every model an experiment can name; its builder is the same name in harness/training/models.py's BUILDERS.
MODELS: dict[str, ModelInfo] = {
    "cnn": ModelInfo((3, 32, 32), "The book's CNN for CIFAR-10 (2,122,186 parameters)."),
    "tiny_cnn": ModelInfo((1, 16, 16), "A tiny CNN with the same layer names, for tests."),
    # B0, the CPU stand-in for B7, is built the same way (1000-class head): the same torchvision
    # constructor as the book's model, smaller, and its ImageNet weights fit it unchanged. On 32x32
    # images the head is 13% of B0's training FLOPs (7.7 of 58.0 MFLOP a sample; 2.1% of B7's 717),
    # and 1.28M of its 5.3M parameters (harness/training/flops.py counts them; tests/test_flops_mfu.py checks).
    "efficientnet_b0": ModelInfo((3, 32, 32), "torchvision EfficientNet-B0 with its 1000-class head (5.3M parameters).",
                                 head_classes=1000, weights="EfficientNet_B0_Weights.DEFAULT"),
    "efficientnet_b7": ModelInfo((3, 32, 32), "torchvision EfficientNet-B7 with its 1000-class head, as the book "
                                 "builds it (66.3M parameters; T7 random init, T10.2 ImageNet weights).",
                                 head_classes=1000, weights="EfficientNet_B7_Weights.DEFAULT"),
    "resnet18_d2l": ModelInfo((1, 28, 28), "d2l's ResNet-18 for small grey images (D12.6)."),
    "lenet_d2l": ModelInfo((1, 28, 28), "d2l 12.5's LeNet written as plain tensors (D12.5)."),
    "mlp_d2l": ModelInfo((512,), "d2l 12.1's MLP on 512 features, 2 outputs (D12.1)."),
}


def models_with_weights() -> list[str]:
    return [name for name, info in MODELS.items() if info.weights]


# Every dataset a config can name; its loader is the same name in harness/training/data.py's DATASETS.
DATASETS = ("cifar10", "fashion_mnist", "imagefolder", "imagefolder_grey28", "digits", "synthetic")
# The datasets read from class folders DATA_DIR/train and DATA_DIR/test.
IMAGE_FOLDER_DATASETS = ("imagefolder", "imagefolder_grey28")


@dataclass(frozen=True)
class Download:
    """A dataset torchvision downloads into data_dir: the files it reads once there (its own
    _check_exists, without the checksums) and the address it comes from (its url or first mirror)."""
    files: tuple[str, ...]
    url: str
    how_to_provide: str   # what a user without network can do instead


DOWNLOADS: dict[str, Download] = {
    "cifar10": Download(
        tuple(f"cifar-10-batches-py/{name}" for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")),
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "copy cifar-10-batches-py into data_dir, or use dataset=imagefolder with data_dir holding train/ and "
        "test/ class folders (make: DATASET=imagefolder DATA_DIR=...)"),
    "fashion_mnist": Download(
        tuple(f"FashionMNIST/raw/{kind}-{part}" for kind in ("train", "t10k")
              for part in ("images-idx3-ubyte", "labels-idx1-ubyte")),
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "copy the FashionMNIST/raw files into data_dir"),
}

# What the clock of the training loops holds (harness/training/train.py, harness/distributed/ddp_train.py).
TRAINING_CLOCK = ("training epochs only: batching from memory, host-to-device copy (on CUDA from pinned buffers, "
                  "asynchronous), forward, loss, backward, optimizer step; warm-up (undone after), pruning, "
                  "evaluation (also the per-epoch and time-to-accuracy checkpoints) and logging are outside the clock")
DDP_CLOCK = ("training epochs only, slowest rank: barrier, then this rank's mini-batches from memory, "
             "host-to-device copy (on CUDA from pinned buffers, asynchronous), forward, loss, backward with "
             "DDP's gradient allreduce, optimizer step; process start, data loading, warm-up epochs (undone "
             "after) and evaluation (also the time-to-accuracy checks after each epoch) are outside the clock")

# What every training run may log (harness/training/flops.py); mfu, or mfu_invalid (an MFU above 1: the peak was
# wrong), or neither with the tag mfu_na (no native arithmetic, no peak). peak_key is a tag.
FLOP_METRICS = ("flops_per_sample", "achieved_tflops", "peak_tflops", "mfu", "mfu_samples", "mfu_time_s",
                "peak_devices", "mfu_invalid")
FLOP_NOTES = ("peak_key", "peak_measured", "mfu_na", "mfu_invalid_reason")   # text values: logged as tags


# The metrics every training experiment logs under the same names (train.training_metrics builds
# them); a training experiment's descriptor lists them as *TRAINING_METRICS, never retyped.
TRAINING_METRICS = ("train_time_s", "test_accuracy", "samples_per_s", "epoch_time_median_s", "epoch_time_iqr_s",
           "epoch_time_mean_s", "warmup_time_s", "eval_time_s", "train_samples", "test_samples")

# What an experiment that trains on torchrun ranks reports of them (its processes' own figures:
# the cell runner measures them itself only in one process).
RANK_METRICS = ("ranks", "global_batch", "threads_used", "peak_rss_mb")


# --- the speed methods of the recipe experiment, for their method cards ---------------------------------
# What a method changes besides how fast a step runs, as [verify.changes] in a study file begins its line
# ("the model: ..."); "speed only" where it changes nothing else.
CHANGES = ("model", "optimizer", "arithmetic", "data", "loss", "speed only")


@dataclass(frozen=True)
class SpeedMethod:
    fields: tuple[str, ...]   # the config fields that switch it on and shape it, the switch first
    changes: str              # one of CHANGES
    description: str          # one line: what it does
    source: str               # where it comes from


# Every speed method experiments/recipe.py stacks, by name (harness/training/speed_methods.py holds the code).
SPEED_METHODS: dict[str, SpeedMethod] = {
    "sparsity": SpeedMethod(("sparsity", "pruning_backend"), "model",
                            "Conv2d filters removed by L1 norm at initialisation: a narrower network from the start.",
                            "book ch. 6 (T6.1)"),
    "channels_last": SpeedMethod(("channels_last",), "speed only",
                                 "Weights and batches in NHWC, the layout oneDNN and cuDNN convolve fastest.",
                                 "PyTorch's channels-last memory format"),
    "compile": SpeedMethod(("execution", "compile_mode", "compile_backend"), "speed only",
                           "torch.compile of the training model; its compilation is inside the clock.",
                           "d2l 12.1 (D12.1)"),
    "autocast": SpeedMethod(("dtype", "grad_scaler"), "arithmetic",
                            "Forward and loss under torch.autocast in bf16 or fp16 (fp16 with a gradient scaler).",
                            "book ch. 7 (T7)"),
    "batch_scaling": SpeedMethod(("batch_size", "lr_base_batch"), "optimizer",
                                 "A bigger batch with the lr scaled linearly with it.", "Goyal et al. 2017"),
    "lr_factor": SpeedMethod(("lr_factor",), "optimizer", "The lr tuned: the configured lr times a factor.",
                             "the speed-recipe study"),
    "data_parallel": SpeedMethod(("world_size", "batch_is_global"), "optimizer",
                                 "DDP ranks, each training its share of the data; a per-rank batch makes the global "
                                 "batch world_size times larger.", "book ch. 9"),
    "threads": SpeedMethod(("threads",), "speed only", "Intra-op threads of each process.", "torch.set_num_threads"),
    "malloc": SpeedMethod(("malloc",), "speed only",
                          "glibc keeps freed memory for reuse instead of returning it to the kernel.",
                          "harness/training/allocator.py"),
    "one_cycle": SpeedMethod(("lr_schedule", "schedule_epochs", "lr_warmup_fraction"), "optimizer",
                             "A linear rise to the peak lr and a linear fall to 0 over a planned number of epochs, "
                             "stepped every optimizer step.", "Smith & Topin 2017 (super-convergence)"),
    "batchnorm": SpeedMethod(("batchnorm",), "model", "A BatchNorm2d after every Conv2d of the book's CNN.",
                             "Ioffe & Szegedy 2015"),
    "label_smoothing": SpeedMethod(("label_smoothing",), "loss",
                                   "Cross-entropy against targets with part of their weight spread over every class.",
                                   "Szegedy et al. 2016; Composer's LabelSmoothing"),
    "ema": SpeedMethod(("ema_decay",), "model",
                       "The weights evaluated are an exponential moving average of the trained ones, updated every "
                       "step.", "Polyak & Juditsky 1992; Composer's EMA"),
    "selective_backprop": SpeedMethod(
        ("selective_backprop_keep", "selective_backprop_start", "selective_backprop_end",
         "selective_backprop_interrupt"),
        "data", "In a window of training each step learns only from the part of its batch with the highest losses, "
                "found by a forward pass without gradients.", "Jiang et al. 2019; Composer's SelectiveBackprop"),
}


def speed_method_of(field: str) -> str | None:
    """The speed method a config field belongs to, or None."""
    return next((name for name, method in SPEED_METHODS.items() if field in method.fields), None)
