"""Training FLOPs, counted rather than estimated, and what they say about a run: its achieved rate
and its model FLOPs utilisation (MFU) against the peak measured on this machine (harness.peak).

    per_sample = flops_per_sample(model, example_batch, "bf16")     # counted once, then cached
    metrics = flop_metrics(per_sample, samples=..., train_time_s=..., device=device, dtype="bf16")
    #  flops_per_sample, achieved_tflops (training FLOPs / train_time_s), peak_tflops, mfu

Counted with torch.utils.flop_counter.FlopCounterMode over one training step of a two-sample batch
through a copy of the model (forward, cross-entropy, backward: the copy's gradients, never the
run's), divided per sample, once per (architecture, input shape, dtype, device type). What counts is
what FlopCounterMode counts: matrix multiplies and convolutions, forward and the backward autograd
really ran (no input gradient for the first layer). Element-wise work, normalisation, pooling and
the optimizer step are not counted, as in the usual MFU (PaLM, Composer). A pruned model has its
own architecture and so its own, smaller count.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from harness.peak import peak_flops
from harness.precision import DTYPES

METRICS = ("flops_per_sample", "achieved_tflops", "peak_tflops", "mfu")
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
        with FlopCounterMode(display=False) as counter:
            with torch.autocast(x.device.type, dtype=DTYPES[dtype], enabled=dtype != "fp32"):
                loss = F.cross_entropy(probe(x), y)
            loss.backward()
        _counted[key] = counter.get_total_flops() / len(x)
    return _counted[key]


def peak_devices(device_type: str, world_size: int = 1, nnodes: int = 1) -> int:
    """How many of the measured peaks a run had: each rank's GPU, or each node's CPU (ranks on
    one CPU share its cores, and the CPU peak is already all of them)."""
    return world_size if device_type == "cuda" else nnodes


def flop_metrics(per_sample: float, *, samples: int, train_time_s: float, device: torch.device | str,
                 dtype: str = "fp32", devices: int = 1) -> dict[str, float]:
    """Achieved rate and MFU of `samples` training samples in `train_time_s` seconds."""
    peak = peak_flops(device, dtype).flops * devices
    achieved = per_sample * samples / train_time_s
    return {"flops_per_sample": per_sample, "achieved_tflops": achieved / 1e12,
            "peak_tflops": peak / 1e12, "mfu": achieved / peak}
