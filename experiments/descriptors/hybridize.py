"""experiments/hybridize.py as the harness reads it without importing torch: `HybridizeConfig`, the fields its
run reads, and its descriptor (title, clock, metrics, smoke config). `run` is imported from that
module on its first call."""

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
