"""What a table's cells were measured on, read back from what the cells logged, so that a check whose
claim depends on the document's machine (16 cores, 8 GPUs, native bf16, the oneCCL backend) can say
"DIFFERS: machine" instead of FAIL when ours lacks it (harness/report/checks.py).

A check names what the claim needs:

    needs = { cores = 16 }            # at least this many CPU cores          (tag cpu.cores)
    needs = { gpus = 8 }              # at least this many GPUs, and the cells ran on them
                                      #                                       (tag gpu.names, param device)
    needs = { native = "bf16" }       # the device computes this dtype itself: its measured peak is at
                                      # least fp32's (metrics peak_tflops), else metric dtype_native,
                                      # else tag cpu.native_bf16
    needs = { backend = "ccl" }       # this torch.distributed backend exists (skipped cells' reasons)

Only what the rows show counts: a fact the cells did not log is never held against them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.specs.checkkinds import Needs
from harness.store import Outcome, RunRecord

# A reduced-precision dtype is native on a device when its measured peak is at least fp32's there.
NATIVE_PEAK_RATIO = 1.0


@dataclass
class MeasuredOn:
    cores: int | None = None                 # CPU cores of the machine (os.cpu_count() in the fingerprint)
    gpus: int | None = None                  # GPUs the cells ran on; 0: they ran on the CPU
    native: set[str] = field(default_factory=set)      # dtypes the device computes itself
    emulated: set[str] = field(default_factory=set)    # dtypes it converts through fp32
    missing_backends: dict[str, str] = field(default_factory=dict)   # backend -> why its cells skipped
    peak_ratio: dict[str, float] = field(default_factory=dict)   # dtype -> its measured peak over fp32's

    def lacks(self, needs: Needs, machine: str = "the document's machine") -> list[str]:
        """Why these cells cannot show the claim, one reason per need this machine does not meet
        (empty when it meets them all, or when the rows do not say)."""
        reasons = []
        cores = needs.cores
        if cores is not None and self.cores is not None and self.cores < cores:
            reasons.append(f"measured on {self.cores} cores; the claim needs {cores} ({machine})")
        gpus = needs.gpus
        if gpus is not None and self.gpus is not None and self.gpus < gpus:
            here = "as CPU processes, on no GPU" if self.gpus == 0 else f"on {self.gpus} GPU(s)"
            reasons.append(f"measured {here}; the claim needs {gpus} GPU(s) ({machine})")
        for dtype in _as_list(needs.native):
            if dtype in self.peak_ratio and self.peak_ratio[dtype] < NATIVE_PEAK_RATIO:
                reasons.append(f"{dtype}'s measured peak on the measuring device is {self.peak_ratio[dtype]:.2f}x "
                               f"fp32's (native means at least {NATIVE_PEAK_RATIO:g}x); {machine} computes it natively")
            elif dtype in self.emulated:
                reasons.append(f"{dtype} is emulated on the measuring device (its cells logged dtype_native 0); "
                               f"{machine} computes it natively")
        for backend in _as_list(needs.backend):
            if backend in self.missing_backends:
                reasons.append(f"no {backend} backend here: {self.missing_backends[backend]}")
        return reasons


def measured_on(finished: list[RunRecord], others: list[RunRecord] = ()) -> MeasuredOn:
    """The facts of one machine's table: `finished` are its cells that finished, `others` the cells
    of the same machine that did not (a skipped ccl cell says the backend is missing)."""
    facts = MeasuredOn()
    sample = finished[0].tags if finished else {}
    if sample.get("cpu.cores", "").isdigit():
        facts.cores = int(sample["cpu.cores"])
    names = sample.get("gpu.names")
    if names is not None:
        on_gpu = any(r.params.get("device", "").startswith("cuda") for r in finished)
        facts.gpus = len([n for n in names.split(", ") if n and n != "none"]) if on_gpu else 0
    for run in finished:
        dtype, native = run.params.get("dtype"), run.metrics.get("dtype_native")
        if dtype is not None and native is not None:
            (facts.native if native else facts.emulated).add(dtype)
    _by_measured_peak(facts, finished)
    if "bf16" not in facts.native | facts.emulated and sample.get("cpu.native_bf16") == "false" \
            and facts.gpus == 0:
        facts.emulated.add("bf16")   # a CPU without AVX512-BF16/AMX-BF16, whatever the cells ran
    for run in others:
        backend = run.params.get("backend")
        if run.outcome == Outcome.SKIPPED and backend and f"backend '{backend}'" in (run.reason or ""):
            facts.missing_backends.setdefault(backend, run.reason.split(";")[0])   # its first clause says why
    return facts


def _by_measured_peak(facts: MeasuredOn, finished: list[RunRecord]) -> None:
    """Native or not, for fp16 and bf16 alike, by what the device does rather than a CPU flag: a
    reduced-precision dtype whose measured peak (the cells' `peak_tflops` per device) is below
    fp32's on the same device is not computed natively in any sense a speed claim means (the Intel
    host's AVX512-FP16 ran fp16 at 0.83x fp32's peak), whatever its flag says."""
    peaks: dict[str, list[float]] = {}
    for run in finished:
        dtype, peak = run.params.get("dtype"), run.metrics.get("peak_tflops")
        if dtype and peak:
            peaks.setdefault(dtype, []).append(peak / (run.metrics.get("peak_devices") or 1))
    if "fp32" not in peaks:
        return
    fp32 = sorted(peaks["fp32"])[len(peaks["fp32"]) // 2]
    for dtype, found in peaks.items():
        if dtype == "fp32":
            continue
        ratio = sorted(found)[len(found) // 2] / fp32
        facts.peak_ratio[dtype] = ratio
        if ratio < NATIVE_PEAK_RATIO:
            facts.native.discard(dtype)
            facts.emulated.add(dtype)
        else:
            facts.emulated.discard(dtype)
            facts.native.add(dtype)


def _as_list(value) -> list:
    return [] if value is None else value if isinstance(value, list) else [value]
