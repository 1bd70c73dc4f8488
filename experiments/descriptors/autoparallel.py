"""Do devices, and compute and copies, run in parallel without being told to (GPU only)?

The card of experiment `autoparallel` (d2l 12.3 and its exercises 2, 3 and 5); its code is
experiments/autoparallel.py, the exercises experiments/autoparallel_exercises.py.
- Fields: `AutoparallelConfig` below: `autopar_case` (two_devices, compute_copy, small_ops, cpu_gpu,
  dependencies), the products' `autopar_size` and `autopar_steps`, where the copies land and on which
  stream, and `epochs`, the timed repeats whose median is quoted.
- Procedure: the case's products (and copies to the host) alone, then queued together without a
  synchronize between them; each figure is wall time from a synchronized start to a synchronize of
  every device used, the first call of each kind a warm-up.
- Metrics: each part's time and both together, `overlap_gain`, `overlap_hidden_share` (0 serial, 1 as
  fast as the longest part), and the exercises' `EXERCISE_METRICS`. Without a GPU a recorded skip.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from experiments import Experiment, RunTarget
from harness.fields.config import RunConfig
from harness.fields.field_groups import EpochsFields

# What the exercises (experiments/autoparallel_exercises.py) return.
EXERCISE_METRICS = ("one_stream_time_s", "streams_time_s", "stream_gain", "cpu_compute_time_s", "serial_time_s",
                    "parallel_time_s", "dependency_gain", "max_abs_diff", "results_match")


class AutoparallelConfig(RunConfig, EpochsFields):
    """D12.3 and its exercises; `epochs` is the number of timed repeats whose median is quoted."""

    autopar_case: Literal["two_devices", "compute_copy", "small_ops", "cpu_gpu", "dependencies"] = Field(
        "two_devices", description="D12.3: two_devices (two GPUs queued without synchronizing), compute_copy "
        "(compute overlapped with copies to the host); its exercises: small_ops (2: small products on "
        "several streams of one GPU), cpu_gpu (3: CPU compute beside GPU compute and copies), dependencies "
        "(5: two branches joined every stage, on two streams, checked against one stream).")
    autopar_size: int = Field(4000, ge=1, description="D12.3: side of the square matrices multiplied.")
    autopar_steps: int = Field(50, ge=1, description="D12.3: matrix products per run.")
    autopar_host_memory: Literal["pageable", "pinned", "pageable_then_pinned"] = Field(
        "pageable", description="D12.3: host memory the results are copied into, the same for the copy baseline "
        "and the overlapped run (pageable, or page-locked pinned); pageable_then_pinned is d2l's mix: baseline "
        "y.to('cpu'), overlapped y.to('cpu', non_blocking=True), which torch puts in pinned memory.")
    autopar_copy_stream: Literal["compute", "separate"] = Field(
        "separate", description="D12.3 compute_copy: compute = d2l, all products then all copies on the one "
        "stream; separate = each result copied on a second stream as soon as it is ready.")
    autopar_streams: int = Field(4, ge=1, description="D12.3 exercise 2: streams the small products are spread over.")
    autopar_cpu_size: int = Field(1000, ge=1, description="D12.3 exercise 3: side of the matrices the CPU "
                                  "multiplies (autopar_steps of them) beside the GPU's work.")


EXPERIMENT = Experiment(
    name="autoparallel",
    title="D12.3: two GPUs queued without synchronizing; compute overlapped with copies to the host; exercises 2, 3, 5",
    run=RunTarget("experiments.autoparallel:run"),
    clock=("each figure is wall time from a synchronized start to a synchronize of every device used; "
           "the first call of each kind is a warm-up outside the clock; median of `epochs` repeats"),
    needs_dataset=False,  # multiplies its own random matrices
    metrics=("gpu0_time_s", "gpu1_time_s", "both_time_s", "compute_time_s", "copy_time_s", "compute_then_copy_s",
             "overlapped_time_s", "train_time_s", "overlap_gain", "overlap_hidden_share", *EXERCISE_METRICS),
    config=AutoparallelConfig,
    sense={"train_time_s": "minimize"},
    # needs a GPU: a recorded skip (CellSkipped) on a machine without one
    smoke={"device": "cuda", "autopar_case": "compute_copy", "autopar_size": 256, "autopar_steps": 4, "epochs": 2},
)
