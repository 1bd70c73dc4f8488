"""`harness machine`: this machine in a few lines, for a user deciding what to run here: the CPU, the
cores this process may use, which dtypes it computes natively and which torch emulates through fp32
(from the CPU's flags, with no benchmark), the GPUs, the peaks measured here if any are cached, the
fingerprint every run is tagged with and today's speed index.

Whether bf16 is native decides what the precision tables (T7) and the studies can show: on a CPU
without AVX512-BF16 or AMX-BF16 a bf16 run measures torch's emulation, many times slower than fp32,
and the studies leave such a dtype out of their space (`--keep-emulated` keeps it)."""

from __future__ import annotations

import os

from harness.machine import hardware

REDUCED = ("bf16", "fp16")
# The CPU instructions that compute each reduced dtype, as a user finds them in a CPU's datasheet.
INSTRUCTIONS = {"bf16": "AVX512-BF16 or AMX-BF16", "fp16": "AVX512-FP16 or AMX-FP16"}
LABEL_WIDTH = 10


def lines() -> list[str]:
    """Every line `harness machine` prints, in order; the speed index is measured (about a second)."""
    import torch

    from harness.machine import calibration
    from harness.machine.fingerprint import FINGERPRINT, fingerprint
    from harness.training.precision import host_cpu_flags, native_support

    tags = fingerprint()
    chip = (f" (family {tags['cpu.family']} model {tags['cpu.model_id']} stepping {tags['cpu.stepping']})"
            if tags["cpu.family"] != "unknown" else "")
    flags = host_cpu_flags()
    cpu = torch.device("cpu")
    native = ["fp32", *(d for d in REDUCED if native_support(cpu, d, flags))]
    emulated = [d for d in REDUCED if d not in native]
    found = [_row("cpu", f"{tags['cpu.model']}{chip}"),
             _row("cores", f"{hardware.usable_core_count()} this process may use, of {os.cpu_count()}"),
             _row("native", ", ".join(native) + " (computed in the dtype itself)")]
    if emulated:
        found.append(_row("emulated", "; ".join(f"{d} (no {INSTRUCTIONS[d]}: torch converts through fp32, many times "
                                                  "slower than fp32)" for d in emulated)))
        found.append(_row("", "so T7's " + " and ".join(emulated) + " rows measure the emulation, and studies leave "
                          f"{'them' if len(emulated) > 1 else 'it'} out of their space (--keep-emulated keeps "
                          f"{'them' if len(emulated) > 1 else 'it'})"))
    found += _gpu_rows(torch, native_support)
    found += _peak_rows()
    found.append(_row("identity", f"fingerprint {tags[FINGERPRINT]} (torch {tags['torch.version']}, CUDA "
                                  f"{tags['torch.cuda']}, git {tags['git.commit'][:10]}): every run is tagged with it"))
    found.append(_row("speed", f"{calibration.calibrate().text()}"))
    found.append(_row("", "(calibrations per second now, higher is faster: a sweep names reused cells measured at "
                          "another speed)"))
    return found


def _row(label: str, text: str) -> str:
    return f"{label:<{LABEL_WIDTH}} {text}"


def _gpu_rows(torch, native_support) -> list[str]:
    count = hardware.gpu_count()
    if count == 0:
        return [_row("gpus", "none that torch can use")]
    rows = []
    for index in range(count):
        device = torch.device(f"cuda:{index}")
        major, minor = torch.cuda.get_device_capability(device)
        native = ["fp32", *(d for d in REDUCED if native_support(device, d))]
        rows.append(_row("gpu" if index == 0 else "", f"cuda:{index} {torch.cuda.get_device_name(device)} "
                         f"(compute capability {major}.{minor}): native {', '.join(native)}"))
    return rows


def _peak_rows() -> list[str]:
    """The peaks cached for this machine, one short line each, or how to measure them."""
    from harness.training import peak

    cached = sorted(peak.cached_peaks(), key=lambda p: (p.device, p.dtype, p.threads))
    if not cached:
        return [_row("peaks", "none measured here yet; `harness peak` measures them (a minute or two)")]
    rows = []
    for index, found in enumerate(cached):
        where = f"{found.threads} thread(s)" if found.device == "cpu" else "one device"
        note = ", under load: likely low" if found.contended else ""
        rows.append(_row("peaks" if index == 0 else "", f"{found.device} {found.dtype} {where}: "
                         f"{found.flops / 1e12:.3g} TFLOP/s ({found.kernel}, {found.measured_at}{note})"))
    return rows
