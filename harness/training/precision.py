"""Mixed precision as a small transform of the training step (T7): autocast around forward and loss,
a gradient scaler around backward and the optimizer step, and the backend flags the book turns on.

Usable on its own:

    precision = Precision.for_device(device, "fp16", grad_scaler=True)
    with precision.autocast():
        loss = loss_fn(model(x), y)
    precision.backward_step(loss, optimizer)
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from harness.errors import CellSkipped
from harness.machine.fingerprint import cpu_flags

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# CPU instructions that compute in the dtype itself; without them oneDNN converts to fp32 and back.
NATIVE_CPU_FLAGS = {"bf16": {"avx512_bf16", "amx_bf16"}, "fp16": {"avx512_fp16", "amx_fp16"}}
# Stands in for /proc/cpuinfo's flags (space-separated) when set: how a test makes this machine a host
# that emulates bf16, or one that computes it, in every process a study starts (trials run in forks).
CPU_FLAGS_ENV = "HARNESS_CPU_FLAGS"


@dataclass
class Precision:
    device_type: str                         # "cpu" or "cuda"
    name: str                                # fp32 | bf16 | fp16
    scaler: torch.amp.GradScaler | None      # only for fp16 with grad_scaler on
    _skipped: torch.Tensor | int = 0           # steps skipped by the scaler, summed on the device

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    @classmethod
    def for_device(cls, device: torch.device, name: str, grad_scaler: bool = True) -> "Precision":
        """Raise CellSkipped when autocast cannot produce `name` on this device at all."""
        reason = autocast_unsupported(device, name)
        if reason:
            raise CellSkipped(reason)
        scaler = torch.amp.GradScaler(device.type) if name == "fp16" and grad_scaler else None
        return cls(device.type, name, scaler)

    def autocast(self):
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.name != "fp32")

    def backward_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            loss.backward()
            optimizer.step()
            return
        # Scale the loss so small fp16 gradients do not flush to zero; step() unscales and skips the
        # step when a gradient is inf/nan; update() lowers the scale after such a step, raises it later.
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        before = self.scaler._scale.clone()  # on the device: counting skips must not synchronize
        self.scaler.update()
        self._skipped = self._skipped + (self.scaler._scale < before).int()

    def skipped_steps(self) -> int:
        """Optimizer steps the scaler skipped because a gradient was inf/nan (reads the device once)."""
        return int(self._skipped) if self.scaler is not None else 0

    def state_dict(self) -> dict:
        """What training changes here (the scaler's scale, the skip count), for harness.training.warmup."""
        return {"scaler": self.scaler.state_dict() if self.scaler is not None else None, "skipped": self._skipped}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])
        self._skipped = state["skipped"]

    def forward_dtype(self, model: nn.Module, example: torch.Tensor) -> torch.dtype:
        """The dtype of the first Linear/Conv output when `example` goes through `model` under this
        autocast: what autocast really produced, not what was asked for."""
        seen: list[torch.dtype] = []
        layer = next(m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)))
        handle = layer.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        try:
            with torch.no_grad(), self.autocast():
                model(example)
        finally:
            handle.remove()
        return seen[0]


def autocast_unsupported(device: torch.device, name: str) -> str | None:
    """Why autocast cannot run `name` on `device`, or None. A tiny probe, because an unsupported
    autocast dtype only warns and silently runs fp32; it runs a Linear and a Conv2d forward and
    backward, since cuDNN may lack a bf16 convolution where cuBLAS has the matmul."""
    if name == "fp32":
        return None
    if device.type == "cuda" and name == "bf16":
        reason = cuda_bf16_unsupported(device)
        if reason:
            return reason
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = _probe(device, name)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"torch.autocast cannot run {name} on {device.type}: {first}"
    if out.dtype != DTYPES[name]:
        said = "; ".join(str(w.message) for w in caught) or "no warning given"
        return f"torch.autocast on {device.type} produced {out.dtype} when {name} was asked for ({said})"
    return None


def cuda_bf16_unsupported(device: torch.device) -> str | None:
    """Why `device` (the cell's GPU, not the current one) cannot compute bf16 itself, or None.
    torch.cuda.is_bf16_supported() counts emulation by default (True on V100 and T4, where bf16
    runs through fp32 conversions and cuDNN has no bf16 convolution); here emulation does not count."""
    with torch.cuda.device(device):
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return None
    major, minor = torch.cuda.get_device_capability(device)
    return (f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no native bf16 "
            "(Ampere, 8.0, and newer have); torch would emulate it, which is not what T7 measures")


def _probe(device: torch.device, name: str) -> torch.Tensor:
    """A Linear and a 3x3 Conv2d under autocast, forward and backward; the Linear's output."""
    weight = torch.ones(2, 2, device=device, requires_grad=True)
    kernel = torch.ones(4, 3, 3, 3, device=device, requires_grad=True)
    with torch.autocast(device.type, dtype=DTYPES[name]):
        out = nn.functional.linear(torch.ones(2, 2, device=device), weight)
        conv = nn.functional.conv2d(torch.ones(1, 3, 8, 8, device=device), kernel, padding=1)
    (out.float().sum() + conv.float().sum()).backward()
    return out


def native_support(device: torch.device, name: str, flags: set[str] | None = None) -> bool:
    """Whether the hardware computes in `name` itself (False = emulated through fp32 conversions)."""
    if name == "fp32":
        return True
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return major >= 8 if name == "bf16" else major >= 7  # Ampere for bf16, tensor cores for fp16
    return bool((host_cpu_flags() if flags is None else flags) & NATIVE_CPU_FLAGS[name])


def host_cpu_flags() -> set[str]:
    """The CPU's feature flags: HARNESS_CPU_FLAGS when set (a test's stand-in), else /proc/cpuinfo's."""
    given = os.environ.get(CPU_FLAGS_ENV)
    return set(given.split()) if given is not None else cpu_flags()


# config field -> the torch.backends attributes it sets (the four flags of the book, TF32 as one)
_FLAGS = {
    "cudnn_benchmark": [(torch.backends.cudnn, "benchmark")],
    "allow_tf32": [(torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")],
    "reduced_precision_reduction": [(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
                                    (torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction")],
}


@contextmanager
def backend_flags(cfg):
    """Set the book's backend flags from the config for the duration of a cell, and restore them
    after (they are process-wide, and a sweep runs many cells in one process). Yields the values
    read back from torch, as 0/1 metrics."""
    saved = [(obj, attr, getattr(obj, attr)) for pairs in _FLAGS.values() for obj, attr in pairs]
    try:
        for field, pairs in _FLAGS.items():
            for obj, attr in pairs:
                setattr(obj, attr, bool(getattr(cfg, field)))
        yield {f"flag_{attr}": float(bool(getattr(obj, attr)))
               for pairs in _FLAGS.values() for obj, attr in pairs}
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)
