"""Training FLOPs, counted rather than estimated, and what they say about a run: its achieved rate
and its model FLOPs utilisation (MFU) against the peak measured on this machine with the cores or
devices the run used (harness.training.peak).

    per_sample = flops_per_sample(model, example_batch, "bf16")     # counted once, then cached
    metrics = flop_metrics(per_sample, samples=..., train_time_s=..., device=device, dtype="bf16")
    #  flops_per_sample, achieved_tflops (training FLOPs / train_time_s), peak_tflops, mfu, and what
    #  the MFU is computed from (mfu_samples, mfu_time_s, peak_devices, the tag peak_key)

Counted with torch.utils.flop_counter.FlopCounterMode over one training step of a two-sample batch
through a copy of the model (forward, cross-entropy, backward: the copy's gradients, never the
run's), divided per sample, once per (architecture, input shape, dtype, device type). What counts is
what FlopCounterMode counts: matrix multiplies and convolutions, forward and the backward autograd
really ran (no input gradient for the first layer). Element-wise work, normalisation, pooling and
the optimizer step are not counted, as in the usual MFU (PaLM, Composer). A pruned model has its
own architecture and so its own, smaller count.

Convolutions are counted by our formula (`conv_term_flops`), not torch's: torch's backward formula
(torch/utils/flop_counter.py, conv_backward_flop) computes the weight gradient as a convolution of
the input with the output gradient over every input channel, ignoring `groups`, so a depthwise conv's
weight gradient is counted once per group (32x for 32 channels; EfficientNet-B0 came out 11x over).
Each of a convolution's three terms (forward, input gradient, weight gradient) does the same
multiply-adds: one per weight element per sample per output position (input position for a
transposed conv), so each is 2 * N * positions * numel(weight), where the weight is already
(C_out, C_in / groups, *kernel). Padding convention: every output position costs the whole kernel,
padded zeros included (what the kernels execute, and torch's convention); bias adds are not counted.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten

from harness.training import peak
from harness.fields.catalogue import FLOP_METRICS as METRICS, FLOP_NOTES as NOTES  # named there, read without torch
from harness.training.precision import DTYPES

_counted: dict[tuple, float] = {}


def architecture(model: nn.Module) -> tuple:
    """What the count depends on: the model's class and every parameter's name and shape."""
    return type(model).__qualname__, tuple((n, tuple(p.shape)) for n, p in model.named_parameters())


def flops_per_sample(model: nn.Module, example: torch.Tensor, dtype: str = "fp32") -> float:
    """FLOPs of one training step per sample for inputs shaped like `example` (a batch), under
    autocast in `dtype`."""
    key = (architecture(model), tuple(example.shape[1:]), dtype, example.device.type)
    if key not in _counted:
        probe = copy.deepcopy(model).train()
        x = example[:2].detach().clone()
        y = torch.zeros(len(x), dtype=torch.long, device=x.device)
        with FlopCounterMode(display=False, custom_mapping=CONV_FORMULAS) as counter:
            with torch.autocast(x.device.type, dtype=DTYPES[dtype], enabled=dtype != "fp32"):
                loss = F.cross_entropy(probe(x), y)
            loss.backward()
        _counted[key] = counter.get_total_flops() / len(x)
    return _counted[key]


def conv_term_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """FLOPs of one term of a convolution (its forward, its input gradient or its weight gradient:
    the same multiply-adds each), `groups` included through the weight's shape."""
    positions = (x_shape if transposed else out_shape)[2:]
    return 2 * x_shape[0] * _prod(positions) * _prod(w_shape)


def _conv_forward_flops(x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed, *args,
                        out_shape=None, **kwargs) -> int:
    return conv_term_flops(x_shape, w_shape, out_shape, transposed)


def _conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                         _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    # Output gradient shape is the forward's output shape: the same positions as the forward.
    forward = conv_term_flops(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def _prod(values) -> int:
    total = 1
    for v in values:
        total *= int(v)
    return total


# Our convolution formulas in place of torch's (FlopCounterMode's custom_mapping, by aten op).
# aten._slow_conv2d_forward (another signature) keeps torch's forward formula, which is right for
# a forward: the weight's shape carries the groups. Only torch's weight-gradient term is wrong.
CONV_FORMULAS = {op: _conv_forward_flops for op in (aten.convolution, aten._convolution,
                                                    aten.cudnn_convolution, aten.convolution_overrideable)}
CONV_FORMULAS[aten.convolution_backward] = _conv_backward_flops


def peak_devices(device_type: str, world_size: int = 1, nnodes: int = 1) -> int:
    """How many of the measured peaks a run had: each rank's GPU, or on a CPU each rank's own cores
    (ranks are pinned to cores of their own, so pass flop_metrics the threads of one rank). A run of
    several copies in one process on a CPU shares one set of cores: 1."""
    return world_size


def flop_metrics(per_sample: float, *, samples: int, train_time_s: float, device: torch.device | str,
                 dtype: str = "fp32", devices: int = 1, threads: int | None = None) -> dict[str, float | str]:
    """Achieved rate and MFU of `samples` training samples in `train_time_s` seconds on `devices`
    devices (GPUs, or CPU ranks of `threads` threads each; default: this process's threads).

    What the MFU is computed from is logged beside it, so it can be recomputed from the record:
    flops_per_sample x mfu_samples / mfu_time_s / peak_tflops, where peak_tflops is peak_devices x
    the figure cached under the tag peak_key (`harness peak`); the tag peak_measured says how that
    figure was measured (kernel, size, when, load), so the report can print it. A dtype the device has no arithmetic
    of its own for gets no MFU and `mfu_na` (a tag) says why. An MFU above 1 is an error of the
    peak, never a result: it is logged as `mfu_invalid` = 1 with the reason (a tag), and the peak is
    dropped from the cache so that the next command measures it again."""
    device = torch.device(device)
    achieved = per_sample * samples / train_time_s
    metrics: dict[str, float | str] = {"flops_per_sample": per_sample, "achieved_tflops": achieved / 1e12,
                                       "mfu_samples": float(samples), "mfu_time_s": train_time_s}
    reason = peak.unsupported(device, dtype)
    if reason:
        metrics["mfu_na"] = f"MFU N/A: {reason}"
        return metrics
    if device.type == "cpu":
        threads = threads or torch.get_num_threads()
    measured = peak.peak_flops(device, dtype, threads=threads)
    total = measured.flops * devices
    metrics.update({"peak_tflops": total / 1e12, "peak_devices": float(devices), "peak_key": measured.key,
                    "peak_measured": measured.provenance()})
    if achieved > total:
        metrics["mfu_invalid"] = 1.0
        metrics["mfu_invalid_reason"] = (
            f"peak below achieved: {achieved / 1e12:.4g} TFLOP/s achieved against {devices} x "
            f"{measured.flops / 1e12:.4g} TFLOP/s ({measured.key}: {measured.kernel} {measured.size}, "
            f"{measured.measured_at}); the peak is measured again at the next command")
        peak.invalidate(measured.key)
    else:
        metrics["mfu"] = achieved / total
    return metrics
