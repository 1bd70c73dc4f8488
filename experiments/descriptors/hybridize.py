"""Is a compiled model faster per forward call than the eager one?

The card of experiment `hybridize` (d2l 12.1, "hybridize"); its code is experiments/hybridize.py.
- Fields: `HybridizeConfig` below: the `model` and its `batch_size`, `execution` (eager,
  torch.jit.script, torch.compile with its mode and backend), `forward_calls` and `warmup_calls`,
  `timing_repeats`.
- Procedure: build the model, make the variant, time its first call (the compilation), check its
  output against eager, then time `forward_calls` calls of one fixed input, `timing_repeats` times.
- Metrics: `per_call_us` and `forward_time_s` (median, with IQR), `first_call_s`,
  `max_abs_diff_vs_eager`, `autograd_on`, `warnings_captured`; the note `captured_warnings`.
"""

from __future__ import annotations

from pydantic import Field

from experiments import Experiment, RunTarget
from harness.fields.config import PositiveInt, RunConfig
from harness.fields.field_groups import BatchFields, CompilationFields, ModelFields, TimingRepeatsFields


class HybridizeConfig(RunConfig, ModelFields, BatchFields, CompilationFields, TimingRepeatsFields):
    forward_calls: PositiveInt = Field(1000, description="D12.1: forward passes inside one timed measurement.")
    warmup_calls: int = Field(20, ge=0, description="D12.1: untimed forward passes after the first call.")


EXPERIMENT = Experiment(
    name="hybridize",
    title="D12.1: forward-pass time eager vs torch.jit.script vs torch.compile",
    run=RunTarget("experiments.hybridize:run"),
    clock=("forward_calls forward passes of one fixed input (autograd on, as in d2l; under no_grad for the "
         "CUDA-graph compile modes on CUDA, see autograd_on), after the first call and warmup_calls untimed "
         "calls; the device is synchronized before each reading; the first call (compilation for "
         "torch.compile) is timed separately"),
    needs_dataset=False,  # times one random input of the model's shape; no epochs
    metrics=("forward_time_s", "forward_time_iqr_s", "per_call_us", "per_call_iqr_us", "first_call_s",
             "max_abs_diff_vs_eager", "warnings_captured", "autograd_on"),
    notes=("captured_warnings",),
    config=HybridizeConfig,
    # script: the deprecation warning it raises exercises the captured_warnings note
    smoke={"model": "mlp_d2l", "batch_size": 1, "execution": "script", "forward_calls": 20, "warmup_calls": 2,
           "timing_repeats": 2, "threads": 1},
)
