"""The peak a run's MFU is measured against: the best steady rate this device reaches in a dtype
with the cores the run used, measured here rather than looked up, and cached per machine fingerprint.

    harness peak                          # the CPU's figures (and each GPU's, where present)
    peak_flops(torch.device("cpu"), "fp32", threads=1).flops   # FLOP/s of one core

How it is measured: several kernel families (a square matmul, a 3x3 convolution, the same
convolution in channels_last: on a CPU MKL's and oneDNN's kernels, on a GPU cuBLAS's and cuDNN's),
each at growing sizes until its rate stops growing (saturation). At each size the kernel is warmed
up and repeated, and its rate is the median of the repeats: an attainable steady rate, not the
fastest single call, which a lucky call or a timer's grain inflates. The peak is the best family at
its best size; its kernel and size are kept beside the figure. A model's convolutions can run
faster than a matmul (oneDNN's direct kernels), so measuring the matmul alone let MFU pass 100%.

On a CPU the figure is per thread count: a run is divided by the peak of the cores it used (a DDP
rank pinned to one core by the one-thread peak, times its ranks). A dtype the device has no
arithmetic of its own for (fp16 on a CPU without AVX512-FP16/AMX-FP16) has no peak: its rate is an
emulation's, and `unsupported` says why instead.

The cache is CACHE_DIR/peak-<fingerprint>.json (fingerprint: CPU, cores, GPUs, torch), keyed by
device, dtype and threads (`Peak.key`). A figure measured while other work held the machine's
cores (harness/machine/machine_load.py) is cached flagged as such and its line says so; it is measured again
at a lookup that finds the machine quiet (other work under CONTENDED_CORES over a short probe), and
the quiet figure replaces it.
`invalidate(key)` drops a figure a run outpaced (MFU above 1 is an error of the peak), so the next
command measures it again; `harness peak --remeasure` measures again whatever the cache holds. A
file lock makes concurrent processes measure one at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from harness import folders
from harness.machine import hardware
from harness.machine.fingerprint import FINGERPRINT, fingerprint
from harness.machine.machine_load import CONTENDED_CORES, OTHER_CORES, LoadWatch
from harness.training.precision import DTYPES, native_support
from harness.training.timing import timed

# Sizes per kernel family, smallest first, from cache-resident to past saturation; a family stops
# growing once a size runs SATURATED times slower than its best (bigger only spills caches).
# Matmul: the side of square operands. Convolution: the channels of a 3x3, padding-1 conv on
# (batch, channels, side, side) inputs.
CPU_SIZES = {"matmul": (256, 512, 1024, 2048), "conv": (32, 64, 128, 256)}
GPU_SIZES = {"matmul": (2048, 4096, 8192), "conv": (128, 256, 512)}
CONV_SHAPE = {"cpu": (16, 16), "cuda": (64, 32)}   # (batch, side) of the convolution's input
SATURATED = 1.1
MIN_SECONDS = 0.2       # per size: repeat until this much time was measured ...
MIN_REPEATS = 3         # ... and at least this many repeats ...
MAX_REPEATS = {"cpu": 10, "cuda": 50}   # ... but no more than this (a GPU matmul takes a millisecond)
# Without a load probe (not Linux), a figure taken under load is measured again once the load
# average has fallen this much.
BUSIER_BY = 1.0
QUIET_PROBE_S = 0.5     # how long a lookup watches the other work before measuring a loaded figure again

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
    flops: float                  # FLOP/s: the median of the repeats of the best kernel at its best size
    device: str                   # "cpu" or the GPU's name
    dtype: str                    # fp32 | bf16 | fp16
    threads: int                  # CPU threads the kernels ran on (0 on a GPU)
    kernel: str                   # the family that reached it: matmul | conv2d | conv2d channels_last
    size: str                     # its shape, e.g. "1024x1024 @ 1024x1024" or "16x256x16x16, 3x3"
    measured_at: str              # local time of the measurement
    load: float                   # one-minute load average when it was measured
    other_cores: float = 0.0      # cores other work kept busy during the measurement
    key: str = ""                 # the cache key (device:dtype:threads), what a run's MFU names

    @property
    def contended(self) -> bool:
        return self.other_cores >= CONTENDED_CORES

    @property
    def vendor_flops(self) -> float | None:
        """The GPU maker's datasheet figure for this dtype (FLOP/s), or None (CPUs, unknown GPUs)."""
        for name, figures in VENDOR_TFLOPS.items():
            if self.device != "cpu" and name in self.device and self.dtype in figures:
                return figures[self.dtype] * 1e12
        return None

    def provenance(self) -> str:
        """How the figure was measured, in one line (logged with every run that is divided by it)."""
        return (f"{self.flops / 1e12:.6g} TFLOP/s per device; {self.kernel} {self.size}; measured {self.measured_at}, "
                f"load average {self.load:.2f}, other work {self.other_cores:.1f} cores")

    def line(self) -> str:
        where = f"{self.threads} thread(s)" if self.device == "cpu" else "one device"
        text = (f"{self.device} {self.dtype} {where}: {self.flops / 1e12:.4g} TFLOP/s measured "
                f"({self.kernel} {self.size}, median of repeats; {self.measured_at}, load average {self.load:.2f}"
                f"; key {self.key})")
        if self.contended:
            text += (f"; measured while other work held {self.other_cores:.1f} cores, so likely low "
                     "(`harness peak --remeasure` on a quiet machine)")
        if self.vendor_flops:
            text += f"; vendor datasheet figure {self.vendor_flops / 1e12:.4g} TFLOP/s (dense, not measured here)"
        return text


def unsupported(device: torch.device | str, dtype: str) -> str | None:
    """Why `dtype` has no peak on `device` (no arithmetic of its own there), or None when it has."""
    device = torch.device(device)
    if native_support(device, dtype):
        return None
    if device.type == "cpu":
        need = "AVX512-FP16 or AMX-FP16" if dtype == "fp16" else "AVX512-BF16 or AMX-BF16"
        return f"{dtype} has no native arithmetic on this CPU (no {need}): it is emulated, so it has no peak"
    return f"{dtype} has no native arithmetic on this GPU ({torch.cuda.get_device_name(device)}), so it has no peak"


def peak_key(device: torch.device | str, dtype: str, threads: int | None = None) -> str:
    device = torch.device(device)
    if device.type == "cpu":
        return f"cpu:{dtype}:{threads or hardware.usable_core_count()}t"
    return f"cuda:{device.index or 0}:{torch.cuda.get_device_name(device)}:{dtype}"


def peak_flops(device: torch.device | str, dtype: str = "fp32", *, threads: int | None = None,
               remeasure: bool = False) -> Peak:
    """The device's peak in `dtype` on `threads` CPU threads (default: every core this process may
    use), from this process's memory, the machine's cache, or measured now. Raises ValueError with
    the reason for a dtype the device has no arithmetic of its own for."""
    device = torch.device(device)
    reason = unsupported(device, dtype)
    if reason:
        raise ValueError(reason)
    threads = (threads or hardware.usable_core_count()) if device.type == "cpu" else 0
    key = peak_key(device, dtype, threads)
    if not remeasure and key in _known:
        return _known[key]
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        cached = _read(path)
        old = _peak(cached.get(key))
        if old is not None and not remeasure and not (old.contended and _quiet_now(old)):
            _known[key] = old
            return old
        new = measure(device, dtype, threads)
        best = _standing(old, new, remeasure)
        cached[key] = asdict(best)
        _write(path, cached)
    _known[key] = best
    return best


def invalidate(key: str) -> None:
    """Forget the figure under `key` (a run went faster than it), here and in the machine's cache,
    so the next command measures it again."""
    _known.pop(key, None)
    path = cache_path()
    if not path.exists():
        return
    with _locked(path.with_suffix(".lock")):
        cached = _read(path)
        if cached.pop(key, None) is not None:
            _write(path, cached)


def cached_peaks() -> list[Peak]:
    """Every figure in this machine's cache (the report lists the ones its runs used)."""
    return [p for p in (_peak(e) for e in _read(cache_path()).values()) if p is not None]


def measure(device: torch.device, dtype: str, threads: int) -> Peak:
    """Each kernel family at growing sizes; the best family's median rate at its best size."""
    load, watch = _load(), LoadWatch()
    saved = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        best = (0.0, "none", "")
        for kernel, sizes in _families(device, DTYPES[dtype]).items():
            family = 0.0
            for size, make in sizes:
                rate, slow = _steady_rate(device, *make())
                best = max(best, (rate, kernel, size))
                if slow or rate * SATURATED < family:
                    break   # saturated (or a slow path, where a bigger size would take minutes)
                family = max(family, rate)
    finally:
        torch.set_num_threads(saved)
    other = watch.finish().get("other_busy_cores", 0.0)
    name = "cpu" if device.type == "cpu" else torch.cuda.get_device_name(device)
    rate, kernel, size = best
    return Peak(rate, name, dtype, threads, kernel, size, time.strftime("%Y-%m-%d %H:%M:%S"), load,
                other, peak_key(device, dtype, threads))


def _families(device: torch.device, dtype: torch.dtype) -> dict[str, list]:
    """Per kernel family, its sizes smallest first as (size text, make); make() builds the operands
    and returns the call and its FLOPs."""
    sizes = CPU_SIZES if device.type == "cpu" else GPU_SIZES
    batch, side = CONV_SHAPE[device.type]

    def matmul(n):
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        return (lambda: a @ b), 2.0 * n ** 3

    def conv(c, layout):
        g = torch.Generator().manual_seed(c)
        x = torch.randn(batch, c, side, side, generator=g).to(device=device, dtype=dtype, memory_format=layout)
        w = torch.randn(c, c, 3, 3, generator=g).to(device=device, dtype=dtype, memory_format=layout)
        # every output position costs the whole kernel, as harness/training/flops.py counts a model's convs
        return (lambda: F.conv2d(x, w, padding=1)), 2.0 * batch * side * side * c * c * 9

    families = {"matmul": [(f"{n}x{n} @ {n}x{n}", lambda n=n: matmul(n)) for n in sizes["matmul"]]}
    for name, layout in (("conv2d", torch.contiguous_format), ("conv2d channels_last", torch.channels_last)):
        families[name] = [(f"{batch}x{c}x{side}x{side} * {c}x{c}x3x3", lambda c=c, layout=layout: conv(c, layout))
                          for c in sizes["conv"]]
    return families


def _steady_rate(device: torch.device, call, flop: float) -> tuple[float, bool]:
    """The median rate of repeated calls after a warm-up, and whether the first call alone was slow
    enough to stand for the rate (a slow path: one call is already a long measurement)."""
    with timed(device) as first:  # warm-up: kernel selection, caches, clocks
        call()
    if first.seconds > MIN_SECONDS:
        return flop / first.seconds, True
    call()
    rates, spent = [], 0.0
    while (spent < MIN_SECONDS or len(rates) < MIN_REPEATS) and len(rates) < MAX_REPEATS[device.type]:
        with timed(device) as clock:
            call()
        spent += clock.seconds
        rates.append(flop / clock.seconds)
    return statistics.median(rates), False


def cache_path() -> Path:
    return folders.CACHE_DIR / f"peak-{fingerprint()[FINGERPRINT]}.json"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or a damaged file: measure again
        return {}


def _write(path: Path, cached: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
    tmp.replace(path)


def _peak(entry) -> Peak | None:
    try:
        return Peak(**entry) if entry else None
    except TypeError:  # written by another version of this module: measure again
        return None


def _standing(old: Peak | None, new: Peak, remeasure: bool) -> Peak:
    """Which figure the cache keeps. A quiet machine's figure replaces one taken under load, and is
    never replaced by one (not even by --remeasure): a figure measured while other work held a core
    is low, and every MFU divided by it would be high (a 2-thread figure taken so on 2026-12-04 was
    0.49x the one measured idle that evening). Between like figures the higher stands, or the new
    one on --remeasure."""
    if old is None:
        return new
    if old.contended != new.contended:
        return old if new.contended else new
    return new if remeasure or new.flops >= old.flops else old


def _quiet_now(old: Peak) -> bool:
    """Whether a figure taken under load should be measured again now: other work holds fewer
    than CONTENDED_CORES of the machine's cores over a short probe. The load average alone was not
    enough: a figure measured at load average 0.8 while other work held a core, looked up inside a
    sweep whose own cell keeps the load near 2, was never measured again."""
    watch = LoadWatch()
    time.sleep(QUIET_PROBE_S)
    other = watch.finish().get(OTHER_CORES)
    if other is None:   # no probe here (not Linux): the load average must have fallen
        return old.load > _load() + BUSIER_BY
    return other < CONTENDED_CORES


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
