"""What a device name means: cpu, cuda or cuda:N. Apart from hardware.py, which imports torch to
count GPUs, so that a config checks its device name with no torch import within reach (the
torch-free half, harness/fields, imports this and nothing else of the machine)."""

from __future__ import annotations

DEVICE_FORMS = "cpu, cuda or cuda:N"


def parse_device(name: str) -> tuple[str, int | None]:
    """("cpu", None), ("cuda", None) or ("cuda", N) for cpu, cuda and cuda:N; ValueError otherwise."""
    kind, sep, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (sep and not index.isdigit()) or (kind == "cpu" and sep):
        raise ValueError(f"must be {DEVICE_FORMS}")
    return kind, int(index) if sep else None
