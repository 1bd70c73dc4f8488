"""How many sign, exponent and mantissa bits has each numeric format (tf32 measured on a GPU)?

The card of experiment `formats` (the book's Table 7.1, ch. 7); its code is experiments/formats.py.
- Fields: `FormatsConfig` below: `number_format`, one of fp64, fp32, tf32, fp16, bf16.
- Procedure: no training and no clock: the bits are read from torch.finfo; tf32, which has no torch
  dtype, is measured by matrix products with the identity on an Ampere or newer GPU (else a skip).
- Metrics: `sign_bits`, `exponent_bits`, `mantissa_bits`, `format_bits`, `storage_bytes`,
  `measured_on_device`, and tf32's probe with TF32 off, `probe_fp32_mantissa_bits`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from experiments import Experiment, RunTarget
from harness.fields.config import RunConfig


class FormatsConfig(RunConfig):
    number_format: Literal["fp64", "fp32", "tf32", "fp16", "bf16"] = Field(
        "fp32", description="Table 7.1: the numeric format whose sign/exponent/mantissa bits are read "
        "(torch.finfo; tf32, which has no torch dtype, measured on an Ampere or newer GPU).")


EXPERIMENT = Experiment(
    name="formats",
    title="Table 7.1: sign, exponent and mantissa bits of fp64, fp32, tf32, fp16, bf16 (torch.finfo; tf32 on a GPU)",
    run=RunTarget("experiments.formats:run"),
    clock="no clock: bits read from torch.finfo, or (tf32) measured by identity matrix products on the GPU",
    needs_dataset=False,
    metrics=("sign_bits", "exponent_bits", "mantissa_bits", "format_bits", "storage_bytes", "measured_on_device",
             "probe_fp32_mantissa_bits"),
    config=FormatsConfig,
    smoke={"number_format": "bf16"},
)
