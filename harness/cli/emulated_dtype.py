"""A job that would train in a dtype this CPU has no instructions for says so before it starts.

torch runs bf16 (or fp16) on such a CPU by converting through fp32, which is correct but many times
slower than fp32 itself: airbench94 at bf16 trained 16x slower than at fp32 on a 2-core AMD EPYC
without AVX512-BF16 (docs/MEASUREMENT.md#emulated-dtypes), about 13 hours a run of airbench94
there. The job still runs (T7 measures exactly that slowness); the
line tells the user before the hours are spent, and how to train in fp32 instead where the dtype is
not what the sweep compares. Smoke scales are left alone: their cells take seconds either way."""

from __future__ import annotations

import sys
from typing import Iterable

REDUCED = ("bf16", "fp16")


def emulated(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The reduced-precision dtypes among (device, dtype) pairs that this CPU would emulate."""
    wanted = sorted({dtype for device, dtype in pairs if device == "cpu" and dtype in REDUCED})
    if not wanted:
        return []
    import torch   # only now: a job with no such cell never loads torch here

    from harness.training.precision import native_support

    return [dtype for dtype in wanted if not native_support(torch.device("cpu"), dtype)]


def notice(kind: str, name: str, scale: str, dtypes: list[str], varied: bool, fp32_scale: str = "") -> str:
    """One line for the user; `varied`: the job compares dtypes, so there is no fp32 to offer;
    `fp32_scale`: the sweep's own fp32 version of this scale, offered before a bare --set."""
    which = " and ".join(dtypes)
    text = (f"harness: {kind} {name} ({scale}) trains in {which} on this CPU, which has no {which} instructions "
            f"(AVX512 or AMX): torch emulates {'them' if len(dtypes) > 1 else 'it'} through fp32, many times "
            f"slower than fp32 (docs/MEASUREMENT.md#emulated-dtypes)")
    if varied:
        return text + "."
    if fp32_scale:
        return text + f"; --scale {fp32_scale} is its fp32 version."
    return text + "; --set dtype=fp32 trains in fp32 instead."


def warn_sweep(spec, scale: str, configs) -> None:
    if scale == "smoke":
        return
    found = emulated((getattr(c, "device", ""), getattr(c, "dtype", "")) for c in configs)
    if found:
        # a scale of its own (airbench's cpu-fp32) also sets what fp32 changes besides the dtype
        fp32_scale = f"{scale}-fp32" if f"{scale}-fp32" in spec.scales else ""
        print(notice("sweep", spec.name, scale, found, "dtype" in spec.axes(), fp32_scale), file=sys.stderr,
              flush=True)


def warn_study(spec, scale: str, fixed: dict) -> None:
    """The study's fixed dtype, every dtype its space can choose and its baseline's."""
    if scale == "smoke":
        return
    dtypes = {fixed.get("dtype", "fp32")}
    for param in spec.space.values():
        for value in param.extremes():
            dtypes.add(param.fields(value).get("dtype"))
    if spec.baseline is not None:
        dtypes.add(spec.baseline.params.get("dtype"))
    found = emulated((fixed.get("device", "cpu"), d) for d in dtypes if isinstance(d, str))
    if found:
        searched = any("dtype" in p.field_names() for p in spec.space.values())
        print(notice("study", spec.name, scale, found, searched), file=sys.stderr, flush=True)


def warn_plan(names: list[str], scale: str) -> None:
    """Every planned sweep's line at once, before the first starts: a reproduction that reaches an
    emulated table hours in should have said so at its start."""
    from harness.errors import UserError
    from harness.specs import sweep_spec

    for name in names:
        try:
            spec = sweep_spec.load(name)
        except UserError:
            continue   # the sweep's own process says what is wrong with it, in its place in the order
        warn_sweep(spec, scale, [c.config for c in sweep_spec.expand(spec, scale) if c.config is not None])
