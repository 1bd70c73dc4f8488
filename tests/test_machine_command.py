"""`harness machine`: this machine in a few lines, the dtypes it computes natively read from the
CPU's flags (HARNESS_CPU_FLAGS stands in for them here), with no benchmark of its own."""

from __future__ import annotations

import json

import pytest

from harness.cli import main


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A peak cache of this test's own: the suite's other tests measure peaks into the shared one."""
    from harness import folders

    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path / "cache")


def _machine(capsys, monkeypatch, flags: str) -> list[str]:
    from harness.training import peak

    monkeypatch.setenv("HARNESS_CPU_FLAGS", flags)
    monkeypatch.setattr(peak, "measure", lambda *a, **k: pytest.fail("harness machine measured a peak"))
    assert main(["machine"]) == 0
    return capsys.readouterr().out.splitlines()


def _row(lines: list[str], label: str) -> str:
    return next(line for line in lines if line.startswith(f"{label} "))


def test_a_cpu_without_bf16_instructions_is_said_to_emulate_bf16_and_fp16(capsys, monkeypatch):
    lines = _machine(capsys, monkeypatch, "sse avx2 avx512f")
    assert _row(lines, "native").split()[1] == "fp32"
    emulated = _row(lines, "emulated")
    assert "bf16 (no AVX512-BF16 or AMX-BF16" in emulated and "fp16 (no AVX512-FP16 or AMX-FP16" in emulated
    assert any("studies leave them out of their space (--keep-emulated keeps them)" in line for line in lines)


def test_a_cpu_with_amx_bf16_computes_bf16_natively(capsys, monkeypatch):
    lines = _machine(capsys, monkeypatch, "avx512f amx_bf16")
    assert "fp32, bf16 (computed in the dtype itself)" in _row(lines, "native")
    assert "bf16" not in _row(lines, "emulated") and "fp16 (no AVX512-FP16" in _row(lines, "emulated")


def test_the_machine_lines_name_cores_identity_and_speed(capsys, monkeypatch):
    from harness.machine.fingerprint import FINGERPRINT, fingerprint
    from harness.machine.hardware import usable_core_count

    lines = _machine(capsys, monkeypatch, "")
    assert _row(lines, "cores").split()[1] == str(usable_core_count())
    assert f"fingerprint {fingerprint()[FINGERPRINT]}" in _row(lines, "identity")
    assert "speed_index" in _row(lines, "speed")
    assert "none measured here yet; `harness peak`" in _row(lines, "peaks")
    assert len(lines) <= 12 and max(len(line) for line in lines) < 200


def test_cached_peaks_are_listed_one_short_line_each(capsys, monkeypatch):
    from harness.training import peak

    figure = {"flops": 4.2e10, "device": "cpu", "dtype": "fp32", "threads": 2, "kernel": "conv2d",
              "size": "16x256x16x16, 3x3", "measured_at": "2026-12-07 21:00", "load": 0.1, "other_cores": 0.0,
              "key": "cpu:fp32:2t"}
    peak.cache_path().parent.mkdir(parents=True)
    peak.cache_path().write_text(json.dumps({"cpu:fp32:2t": figure}))
    lines = _machine(capsys, monkeypatch, "")
    assert "cpu fp32 2 thread(s): 0.042 TFLOP/s (conv2d, 2026-12-07 21:00)" in _row(lines, "peaks")
