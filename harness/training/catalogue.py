"""What the training half offers, by name, readable without importing torch: the models (with the
input each expects and the weights it can start from), the datasets, and the metric names and clock
texts the experiments' descriptors cite.

The command line checks a sweep's names and values against these before it loads torch, MLflow or
Optuna, so a mistake is answered in a fraction of a second. The code behind each name lives beside
it: the builders in models.py, the loaders in data.py, the clocks in train.py and
harness/distributed/ddp_train.py, the FLOP metrics in flops.py.
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


# Every model an experiment can name; its builder is the same name in models.py's BUILDERS.
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


# Every dataset a config can name; its loader is the same name in data.py's DATASETS.
DATASETS = ("cifar10", "fashion_mnist", "imagefolder", "imagefolder_grey28", "digits", "synthetic")
# The datasets read from class folders DATA_DIR/train and DATA_DIR/test.
IMAGE_FOLDER_DATASETS = ("imagefolder", "imagefolder_grey28")

# What the clock of the training loops holds (train.py, harness/distributed/ddp_train.py).
TRAINING_CLOCK = ("training epochs only: batching from memory, host-to-device copy (on CUDA from pinned buffers, "
                  "asynchronous), forward, loss, backward, optimizer step; warm-up (undone after), pruning, "
                  "evaluation (also the per-epoch and time-to-accuracy checkpoints) and logging are outside the clock")
DDP_CLOCK = ("training epochs only, slowest rank: barrier, then this rank's mini-batches from memory, "
             "host-to-device copy (on CUDA from pinned buffers, asynchronous), forward, loss, backward with "
             "DDP's gradient allreduce, optimizer step; process start, data loading, warm-up epochs (undone "
             "after) and evaluation (also the time-to-accuracy checks after each epoch) are outside the clock")

# What every training run may log (flops.py); mfu, or mfu_invalid (an MFU above 1: the peak was
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
