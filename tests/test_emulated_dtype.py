"""A job that would train in a dtype this CPU emulates says so, once, before it starts."""
from types import SimpleNamespace

import pytest

from harness.cli import emulated_dtype
from harness.specs import study_spec


@pytest.fixture
def cpu_without_bf16(monkeypatch):
    monkeypatch.setattr("harness.training.precision.cpu_flags", lambda: {"avx2", "avx512f"})


@pytest.fixture
def cpu_with_amx(monkeypatch):
    monkeypatch.setattr("harness.training.precision.cpu_flags", lambda: {"avx512f", "amx_bf16", "avx512_fp16"})


def sweep(axes=(), scales=()):
    return SimpleNamespace(name="table", axes=lambda: list(axes), scales={name: {} for name in scales})


def cells(*dtypes, device="cpu"):
    return [SimpleNamespace(device=device, dtype=d) for d in dtypes]


def test_only_a_reduced_dtype_the_cpu_lacks_is_emulated(cpu_without_bf16):
    emulated = emulated_dtype.emulated
    assert emulated([("cpu", "fp32"), ("cpu", "bf16"), ("cpu", "bf16")]) == ["bf16"]
    assert emulated([("cuda", "bf16")]) == []   # a GPU's support is the precision module's business
    assert emulated([("cpu", "fp32")]) == []


def test_a_cpu_with_the_instructions_hears_nothing(cpu_with_amx, capsys):
    emulated_dtype.warn_sweep(sweep(), "cpu", cells("bf16", "fp16"))
    assert capsys.readouterr().err == ""


def test_a_sweep_in_emulated_bf16_says_so_and_offers_fp32(cpu_without_bf16, capsys):
    emulated_dtype.warn_sweep(sweep(), "cpu", cells("bf16", "bf16"))
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "sweep table (cpu) trains in bf16" in line
    assert "emulates it through fp32" in line and line.rstrip().endswith("--set dtype=fp32 trains in fp32 instead.")


def test_a_sweep_with_an_fp32_scale_of_its_own_offers_that_scale(cpu_without_bf16, capsys):
    emulated_dtype.warn_sweep(sweep(scales=["cpu", "cpu-fp32"]), "cpu", cells("bf16"))
    line = capsys.readouterr().err
    assert line.rstrip().endswith("--scale cpu-fp32 is its fp32 version.") and "--set dtype" not in line
    emulated_dtype.warn_plan(["airbench"], "cpu")   # the shipped sweep has one
    assert "--scale cpu-fp32" in capsys.readouterr().err


def test_a_sweep_comparing_dtypes_is_told_without_an_fp32_to_switch_to(cpu_without_bf16, capsys):
    emulated_dtype.warn_sweep(sweep(axes=["dtype"]), "cpu", cells("fp32", "bf16", "fp16"))
    line = capsys.readouterr().err
    assert "bf16 and fp16" in line and "emulates them" in line and "--set dtype" not in line


def test_smoke_cells_are_left_alone(cpu_without_bf16, capsys):
    emulated_dtype.warn_sweep(sweep(), "smoke", cells("bf16"))
    assert capsys.readouterr().err == ""


def test_a_study_is_told_of_a_dtype_its_space_or_baseline_can_choose(cpu_without_bf16, capsys):
    spec = study_spec.load("study_airbench_cpu")   # fp32 or bf16 searched; the baseline is bf16
    emulated_dtype.warn_study(spec, "cpu", spec.fixed("cpu", {}))
    line = capsys.readouterr().err
    assert "study study_airbench_cpu (cpu) trains in bf16" in line and "--set dtype" not in line


def test_a_reproduction_names_every_emulated_table_before_the_first_runs(cpu_without_bf16, capsys):
    emulated_dtype.warn_plan(["airbench", "sparsity", "amp"], "cpu")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[2] for line in lines] == ["airbench", "amp"]   # sparsity trains in fp32
