"""Table 7.1 (book ch. 7): the bits of each numeric format, read from torch, not copied from the book.

No training. For a torch dtype (fp64, fp32, fp16, bf16) everything comes from `torch.finfo`:
- mantissa (the book's "fraction") bits m: the gap after 1.0 is eps = 2^-m;
- exponent bits e: the normal exponents run from log2(tiny) to floor(log2(max)); the exponent field
  has 2^e codes, two of them reserved (zero/subnormals, inf/nan), so 2^e = emax - emin + 3;
- sign bits: what is left of the bits finfo counts;
- storage bytes: the element size of a tensor of that dtype.

TF32 has no torch dtype: it is how the tensor cores of an Ampere-or-newer NVIDIA GPU read fp32
operands when TF32 is allowed. It is measured there, by matrix products with the identity (the
output is the operand as the tensor cores read it, accumulated in fp32): the mantissa is the
largest k for which 1 + 2^-k is read exactly; the exponent follows from the largest and smallest
powers of two read exactly; the sign from -1. The same probe with TF32 off must see fp32's 23 bits
(`probe_fp32_mantissa_bits`), or the cell fails: the probe would not be measuring what it says.
Without such a GPU the tf32 cell is a skip with the reason.

    harness run formats --set number_format=bf16
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from experiments.descriptors.formats import FormatsConfig
from harness.errors import CellSkipped
from harness.training.train import EpochCallback

__all__ = ["FormatsConfig", "run"]

TORCH_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PROBE_SIDE = 512  # big enough that cuBLAS takes a tensor-core kernel, not a small-matrix fp32 one


def finfo_bits(dtype: torch.dtype) -> dict[str, float]:
    info = torch.finfo(dtype)
    # frexp(v) = (f, p) with v = f * 2^p, 0.5 <= f < 1: exact, where log2 rounds fp64's max up to 1024.
    (eps_f, eps_p), (_, max_p), (tiny_f, tiny_p) = math.frexp(info.eps), math.frexp(info.max), math.frexp(info.tiny)
    mantissa, emax, emin = 1 - eps_p, max_p - 1, tiny_p - 1
    exponent = math.log2(emax - emin + 3)
    if not (eps_f == 0.5 and tiny_f == 0.5 and exponent.is_integer()):
        raise RuntimeError(f"torch.finfo({dtype}) does not describe a binary IEEE-style format: eps {info.eps}, "
                           f"tiny {info.tiny}, max {info.max}")
    return {"sign_bits": info.bits - exponent - mantissa, "exponent_bits": exponent, "mantissa_bits": float(mantissa),
            "format_bits": float(info.bits), "storage_bytes": float(torch.empty(0, dtype=dtype).element_size())}


def tf32_unsupported(device: torch.device) -> str | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        where = (f"this cell runs on device={device}" if device.type != "cuda"
                 else "torch sees no CUDA GPU on this machine")
        return ("TF32 exists only in the tensor cores of an Ampere or newer NVIDIA GPU and has no torch dtype; "
                f"its bits are measured there (device=cuda), and {where}")
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        return (f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no TF32 "
                "(Ampere, 8.0, and newer have)")
    return None


@contextmanager
def _tf32(allowed: bool):
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _as_read(value: float, device: torch.device) -> float:
    """`value` as the matmul reads it: every element of the operand is `value`, the other is the identity."""
    operand = torch.full((PROBE_SIDE, PROBE_SIDE), value, device=device, dtype=torch.float32)
    return float((operand @ torch.eye(PROBE_SIDE, device=device))[0, 0])


def _mantissa_seen(device: torch.device) -> int:
    """The largest k for which 1 + 2^-k is read exactly: m for an m-bit mantissa, whatever the rounding
    (a tie, 1 + 2^-(m+1), goes to 1 or to 1 + 2^-m, never stays)."""
    return max((k for k in range(1, 40) if _as_read(1.0 + 2.0 ** -k, device) == 1.0 + 2.0 ** -k), default=0)


def tf32_bits(device: torch.device) -> dict[str, float]:
    with _tf32(False):
        fp32_mantissa = _mantissa_seen(device)
    with _tf32(True):
        mantissa = _mantissa_seen(device)
        # Powers of two up to fp32's largest: the ones read back unchanged give the exponent range.
        emax = max(k for k in range(0, 128) if _as_read(2.0 ** k, device) == 2.0 ** k)
        emin = min(k for k in range(-126, 1) if _as_read(2.0 ** k, device) == 2.0 ** k)
        sign = 1.0 if _as_read(-1.0, device) == -1.0 else 0.0
    if fp32_mantissa != 23:
        raise RuntimeError(f"with TF32 off the probe saw {fp32_mantissa} mantissa bits, not fp32's 23: it does not "
                           "read the operands as the matmul does, so its TF32 figure would mean nothing")
    exponent = math.log2(emax - emin + 3)
    return {"sign_bits": sign, "exponent_bits": exponent, "mantissa_bits": float(mantissa),
            "format_bits": sign + exponent + mantissa,
            # TF32 is how fp32 operands are read, so they are held as fp32
            "storage_bytes": float(torch.empty(0, dtype=torch.float32).element_size()),
            "probe_fp32_mantissa_bits": float(fp32_mantissa)}


def run(cfg: FormatsConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    if cfg.number_format in TORCH_DTYPES:
        return {**finfo_bits(TORCH_DTYPES[cfg.number_format]), "measured_on_device": 0.0}
    device = torch.device(cfg.device)
    reason = tf32_unsupported(device)
    if reason:
        raise CellSkipped(reason)
    return {**tf32_bits(device), "measured_on_device": 1.0}
