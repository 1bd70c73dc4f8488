"""T7 (book ch. 7): does automatic mixed precision cut training time, and does it cost accuracy?

The book's procedure: EfficientNet-B7 (random init) on CIFAR-10, 50 epochs, batch 2048, Adam lr 1e-3,
wd 0.005, on an A100; the backend flags on; `torch.autocast(device, dtype)` around forward and loss;
a gradient scaler for fp16. Here the dtype is the `dtype` field; `grad_scaler=false` reproduces the
notebook's scaler-less fp16 run.

    harness run amp --set dtype=bf16 --set model=efficientnet_b0 --set dataset=digits --set epochs=1

The book's backend flags are fields (`cudnn_benchmark`, `allow_tf32`, `reduced_precision_reduction`),
set for the cell, restored after, and read back as `flag_*` metrics; the sweep turns all of them on
for every dtype, as the book's notebook did (cuDNN's TF32 is on by default in torch, so the book's
fp32 baseline convolved in TF32 too). EfficientNet keeps torchvision's 1000-class head, as the book
builds it (CIFAR's labels 0-9 index into it), B0 as well; accuracy is measured in eval mode, where
the book's notebooks measured in train mode. `dtype_native` says whether the hardware computes in
that dtype (CPU: AVX512-BF16/AMX-BF16, AVX512-FP16/AMX-FP16); the report writes "emulated" beside a
cell where it does not. `scaler_skipped_steps` counts the fp16 steps the scaler skipped (inf/nan
gradients); the dtype the forward really ran in is the tag `harness.note.forward_dtype`. The clock
holds the training epochs, as T6.1's.

Before training, the experiment checks what autocast really produced in the first Linear/Conv of
the forward: a cell whose forward did not run in the requested dtype fails rather than reporting an
fp32 time as a bf16 one. A dtype autocast cannot run on the device is a skipped cell with its reason.
"""

from __future__ import annotations

import torch

from experiments.descriptors.amp import AmpConfig
from harness.training.data import load_splits
from harness.training.flops import flop_metrics, flops_per_sample
from harness.training.models import MODELS, build_model, count_parameters
from harness.training.precision import Precision, backend_flags, native_support
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.timing import timed
from harness.training.train import EpochCallback, evaluate, make_optimizer, prepare, train_epochs, training_metrics
from harness.training.warmup import restored

__all__ = ["AmpConfig", "run"]


def run(cfg: AmpConfig, on_epoch: EpochCallback | None = None) -> dict[str, float | str]:
    device = prepare(cfg)
    precision = Precision.for_device(device, cfg.dtype, cfg.grad_scaler)
    data = load_splits(cfg.dataset, cfg.data_dir, MODELS[cfg.model].input_shape, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)
    with backend_flags(cfg) as flags:
        model = build_model(cfg.model, data.num_classes).to(device)
        produced = precision.forward_dtype(model, data.train.x[:2].to(device))
        if produced != precision.dtype:
            raise RuntimeError(f"autocast was asked for {cfg.dtype} but the forward ran in {produced}")
        order = torch.Generator().manual_seed(cfg.seed)
        fit = dict(batch_size=cfg.batch_size, device=device, generator=order, precision=precision)
        optimizer = make_optimizer(cfg, model)
        with restored(model, optimizer, order, precision):  # untimed, and undone: trains nothing (harness.training.warmup)
            warmup = train_epochs(model, optimizer, data.train, epochs=cfg.warmup_epochs, **fit)
        # Evaluated in fp32: the question is what the mixed-precision training did to the weights.
        watch = AccuracyWatch.from_config(
            cfg, lambda: evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=device))
        epoch_times = train_epochs(model, optimizer, data.train, epochs=cfg.epochs, on_epoch=on_epoch,
                                   watch=watch, **fit)
        with timed(device) as evaluation:
            accuracy = evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=device)

    samples = watch.checkpoints[-1].samples if watch else len(data.train) * len(epoch_times)
    train = training_metrics(epoch_times, warmup, train_samples=len(data.train), test_samples=len(data.test),
                             accuracy=accuracy, eval_seconds=evaluation.seconds, samples_trained=samples)
    return {
        **train,
        **flop_metrics(flops_per_sample(model, data.train.x[:2].to(device), cfg.dtype), samples=samples,
                       train_time_s=train["train_time_s"], device=device, dtype=cfg.dtype),
        **(watch.metrics() if watch else {}),
        "param_count": count_parameters(model),
        "dtype_native": float(native_support(device, cfg.dtype)),
        "grad_scaler_used": float(precision.scaler is not None),
        # The scale after the last step (1 read, outside the clock); it halves at every skipped step.
        "grad_scale_final": precision.scaler.get_scale() if precision.scaler is not None else 1.0,
        "scaler_skipped_steps": float(precision.skipped_steps()),
        **flags,
        "forward_dtype": str(produced).removeprefix("torch."),
    }
