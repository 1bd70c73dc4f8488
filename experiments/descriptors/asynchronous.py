"""How much of an unsynchronized GPU time is only work being queued?

The card of experiment `async` (d2l 12.2); its code is experiments/asynchronous.py.
- Fields: `AsyncConfig` below: `matrix_size` (on a GPU a lower bound, grown until the device work
  dwarfs the launch cost), `matmul_iterations`, `async_pause_s` (the notes' exercise) and
  `timing_repeats`.
- Procedure: `matmul_iterations` x (a random normal matrix, then its square) in numpy, a pause, then
  in torch on the device with the clock read before and after synchronizing it; `timing_repeats`
  repeats, median quoted.
- Metrics: `numpy_time_s`, `torch_nosync_time_s`, `torch_sync_time_s` (each with its IQR),
  `nosync_share` (about 1 on a CPU, which queues nothing), `numpy_over_torch`, `matrix_size_used`.
"""

from __future__ import annotations

from pydantic import Field

from experiments import Experiment, RunTarget
from harness.fields.config import PositiveInt, RunConfig
from harness.fields.field_groups import TimingRepeatsFields


class AsyncConfig(RunConfig, TimingRepeatsFields):
    matrix_size: PositiveInt = Field(1000, description="D12.2: side of the random square matrix multiplied by itself.")
    matmul_iterations: PositiveInt = Field(10, description="D12.2: random-then-matmul iterations inside one measurement.")
    async_pause_s: float = Field(
        0.0, ge=0, description="D12.2: seconds to sleep between the numpy and the torch measurement (the notes' "
        "exercise: time.sleep(5) made torch faster, numpy still busy when torch's clock started).")


EXPERIMENT = Experiment(
    name="async",
    title="D12.2: random-then-matmul in numpy and torch, clock read with and without sync",
    run=RunTarget("experiments.asynchronous:run"),
    clock=("matmul_iterations x (random normal matrix, then its square; on a GPU the side is grown until the "
         "device work dwarfs the launch cost, see matrix_size_used): numpy on the host, and torch on "
         "the device read twice, before and after synchronizing it; one untimed torch round first "
         "(allocator, kernels, BLAS threads); async_pause_s of sleep between numpy and torch, outside both "
         "clocks; timing_repeats repeats, median quoted"),
    needs_dataset=False,  # makes its own random matrices; no epochs
    metrics=("numpy_time_s", "numpy_time_iqr_s", "torch_nosync_time_s", "torch_nosync_time_iqr_s",
             "torch_sync_time_s", "torch_sync_time_iqr_s", "nosync_share", "numpy_over_torch", "matrix_size_used",
             "numpy_blas_threads"),
    config=AsyncConfig,
    smoke={"device": "cpu", "matrix_size": 64, "matmul_iterations": 2, "timing_repeats": 2, "threads": 1},
)
