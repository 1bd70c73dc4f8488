"""The peak a run's MFU is measured against: the fastest matrix multiply this device reaches in a
dtype, measured here rather than looked up, and cached per machine fingerprint.

    harness peak                          # the CPU's figures (and each GPU's, where present)
    peak_flops(torch.device("cpu"), "fp32").flops   # FLOP/s

How it is measured: square matmuls of a few sizes, warmed up, each repeated; the fastest rate
seen is the peak. A peak is a best case: the median would count a shared machine's interference
as the hardware's limit. On a CPU the matmuls use every core this process may use, because the
question is how close a run comes to the machine, whatever threads it chose; on a GPU, one device.

The cache is CACHE_DIR/peak-<fingerprint>.json (fingerprint: CPU, cores, GPUs, torch), keyed by
device, dtype and threads. A cached figure taken while the machine was busier than it is now (the
one-minute load average, more than one above) is measured again and the higher figure kept, so a
measurement made under load does not stand once the machine is quiet. `harness peak --remeasure`
measures again whatever the load. A file lock makes concurrent processes measure one at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from harness.data import CACHE_DIR
from harness.fingerprint import fingerprint
from harness.precision import DTYPES
from harness.timing import timed
from harness.train import available_cores

CPU_SIZES = (512, 1024, 2048)
GPU_SIZES = (4096, 8192)
MIN_SECONDS = 0.25      # per size: repeat until this much time was measured ...
MAX_REPEATS = {"cpu": 10, "cuda": 50}   # ... or this many repeats (a GPU matmul takes a millisecond)
BUSIER_BY = 1.0         # a cached figure is measured again when its load average was this much higher

# Datasheet figures (dense, no sparsity), TFLOP/s, shown beside the measured peak on GPUs and named
# as the vendor's; never used for MFU. Longer names first: "H100 PCIe" before "H100".
VENDOR_TFLOPS: dict[str, dict[str, float]] = {
    "H100 PCIe": {"fp32": 51.2, "bf16": 756.0, "fp16": 756.0},
    "H100": {"fp32": 66.9, "bf16": 989.4, "fp16": 989.4},
    "H200": {"fp32": 66.9, "bf16": 989.4, "fp16": 989.4},
    "A100": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},
    "A10": {"fp32": 31.2, "bf16": 125.0, "fp16": 125.0},
    "L4": {"fp32": 30.3, "bf16": 121.0, "fp16": 121.0},
    "V100": {"fp32": 15.7, "fp16": 125.0},
    "T4": {"fp32": 8.1, "fp16": 65.0},
}

_known: dict[str, "Peak"] = {}   # this process's figures, by cache key


@dataclass(frozen=True)
class Peak:
    flops: float                  # FLOP/s, the fastest rate measured
    device: str                   # "cpu" or the GPU's name
    dtype: str                    # fp32 | bf16 | fp16
    threads: int                  # CPU threads the matmuls ran on (0 on a GPU)
    size: int                     # the matmul side that reached it
    measured_at: str              # local time of the measurement
    load: float                   # one-minute load average when it was measured

    @property
    def vendor_flops(self) -> float | None:
        """The GPU maker's datasheet figure for this dtype (FLOP/s), or None (CPUs, unknown GPUs)."""
        for name, figures in VENDOR_TFLOPS.items():
            if self.device != "cpu" and name in self.device and self.dtype in figures:
                return figures[self.dtype] * 1e12
        return None

    def line(self) -> str:
        where = f"{self.threads} thread(s)" if self.device == "cpu" else "one device"
        text = (f"{self.device} {self.dtype}: {self.flops / 1e12:.4g} TFLOP/s measured "
                f"({self.size}x{self.size} matmul, {where}, {self.measured_at}, load average {self.load:.2f})")
        if self.vendor_flops:
            text += f"; vendor datasheet figure {self.vendor_flops / 1e12:.4g} TFLOP/s (dense, not measured here)"
        return text


def peak_flops(device: torch.device | str, dtype: str = "fp32", *, remeasure: bool = False) -> Peak:
    """The device's peak in `dtype`, from this process's memory, the machine's cache, or measured now."""
    device = torch.device(device)
    threads = available_cores() if device.type == "cpu" else 0
    key = _key(device, dtype, threads)
    if not remeasure and key in _known:
        return _known[key]
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        cached = _read(path)
        old = _peak(cached.get(key))
        if old is not None and not remeasure and old.load <= _load() + BUSIER_BY:
            _known[key] = old
            return old
        new = measure(device, dtype, threads)
        best = new if old is None or new.flops >= old.flops else old
        cached[key] = asdict(best)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
        tmp.replace(path)
    _known[key] = best
    return best


def measure(device: torch.device, dtype: str, threads: int) -> Peak:
    """Time square matmuls of each size in `dtype` on `device` and return the fastest rate."""
    load = _load()
    saved = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        best, best_size = 0.0, 0
        for n in (CPU_SIZES if device.type == "cpu" else GPU_SIZES):
            g = torch.Generator().manual_seed(n)
            a = torch.randn(n, n, generator=g).to(device=device, dtype=DTYPES[dtype])
            b = torch.randn(n, n, generator=g).to(device=device, dtype=DTYPES[dtype])
            with timed(device) as first:  # warm-up: kernel selection, caches, clocks
                a @ b
            if first.seconds > MIN_SECONDS:
                # A slow path (fp16 on a CPU without it runs near 1 GFLOP/s): one call already took
                # long enough to measure, and a bigger size would take minutes.
                best, best_size = max((best, best_size), (2 * n ** 3 / first.seconds, n))
                break
            a @ b
            spent, repeats = 0.0, 0
            while spent < MIN_SECONDS and repeats < MAX_REPEATS[device.type]:
                with timed(device) as clock:
                    a @ b
                spent += clock.seconds
                repeats += 1
                rate = 2 * n ** 3 / clock.seconds
                if rate > best:
                    best, best_size = rate, n
    finally:
        torch.set_num_threads(saved)
    name = "cpu" if device.type == "cpu" else torch.cuda.get_device_name(device)
    return Peak(best, name, dtype, threads, best_size, time.strftime("%Y-%m-%d %H:%M:%S"), load)


def cache_path() -> Path:
    return CACHE_DIR / f"peak-{fingerprint()['fingerprint']}.json"


def _key(device: torch.device, dtype: str, threads: int) -> str:
    if device.type == "cpu":
        return f"cpu:{dtype}:{threads}t"
    return f"cuda:{device.index or 0}:{torch.cuda.get_device_name(device)}:{dtype}"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or a damaged file: measure again
        return {}


def _peak(entry) -> Peak | None:
    try:
        return Peak(**entry) if entry else None
    except TypeError:  # written by another version of this module: measure again
        return None


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
