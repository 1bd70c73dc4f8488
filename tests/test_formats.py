"""Table 7.1 (book ch. 7): each format's bits read from torch agree with the book's table, the sweep
records them with exact verdicts, and TF32 (no torch dtype) is measured on a GPU or skipped saying why."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from experiments import formats
from experiments import make_config
from harness.errors import CellSkipped
from harness.report import checks, report_files, tables as report
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep

BOOK = {r["number_format"]: r for r in sweep_spec.load("formats").published["rows"]}
FIELDS = ("sign_bits", "exponent_bits", "mantissa_bits", "format_bits", "storage_bytes")


@pytest.mark.parametrize("name", ["fp32", "fp64", "fp16", "bf16"])
def test_torch_finfo_gives_the_book_s_bits(name):
    got = formats.run(make_config({"experiment": "formats", "number_format": name}))
    assert {k: got[k] for k in FIELDS} == {k: BOOK[name][k] for k in FIELDS}
    assert got["measured_on_device"] == 0.0


def test_the_bits_come_from_finfo_not_from_a_copy_of_the_table():
    # float8 e5m2 is an IEEE-style format the table does not list: the same reading must find its bits.
    got = formats.finfo_bits(torch.float8_e5m2)
    assert (got["sign_bits"], got["exponent_bits"], got["mantissa_bits"], got["storage_bytes"]) == (1, 5, 2, 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_tf32_without_an_ampere_gpu_is_a_skip_saying_why():
    with pytest.raises(CellSkipped, match="TF32 exists only in the tensor cores .* this cell runs on device=cpu"):
        formats.run(make_config({"experiment": "formats", "number_format": "tf32", "device": "cpu"}))
    with pytest.raises(CellSkipped, match="torch sees no CUDA GPU"):
        formats.run(make_config({"experiment": "formats", "number_format": "tf32", "device": "cuda"}))


def _tensor_core_read(rounding: str, ignores_the_flag: bool = False):
    """What a matmul with the identity returns for an fp32 operand: the operand rounded to 10 mantissa
    bits when TF32 is allowed (fp32's exponent range), to fp32's 23 otherwise."""
    import math

    import numpy as np

    def read(value: float, device) -> float:
        x = float(np.float32(value))
        if not (torch.backends.cuda.matmul.allow_tf32 or ignores_the_flag) or x == 0:
            return x
        f, e = math.frexp(x)
        scaled = f * 2 ** 11
        kept = math.floor(abs(scaled) + 0.5) if rounding == "away" else round(abs(scaled))
        return math.copysign(math.ldexp(kept, e - 11), x)
    return read


@pytest.mark.parametrize("rounding", ["even", "away"])
def test_the_tf32_probe_finds_10_mantissa_and_8_exponent_bits_whatever_the_rounding(rounding, monkeypatch):
    monkeypatch.setattr(formats, "_as_read", _tensor_core_read(rounding))
    got = formats.tf32_bits(torch.device("cuda"))
    assert {k: got[k] for k in FIELDS} == {k: BOOK["tf32"][k] for k in FIELDS}
    assert got["probe_fp32_mantissa_bits"] == 23


def test_a_probe_that_does_not_see_fp32_with_tf32_off_fails_the_cell(monkeypatch):
    monkeypatch.setattr(formats, "_as_read", _tensor_core_read("even", ignores_the_flag=True))
    with pytest.raises(RuntimeError, match="with TF32 off the probe saw 10 mantissa bits, not fp32's 23"):
        formats.tf32_bits(torch.device("cuda"))


@pytest.mark.gpu
def test_tf32_measured_on_an_ampere_gpu_has_the_book_s_bits():
    major, _ = torch.cuda.get_device_capability(0)
    if major < 8:
        pytest.skip("TF32 needs compute capability 8.0 or newer")
    got = formats.run(make_config({"experiment": "formats", "number_format": "tf32", "device": "cuda"}))
    assert {k: got[k] for k in FIELDS} == {k: BOOK["tf32"][k] for k in FIELDS}
    assert got["probe_fp32_mantissa_bits"] == 23 and got["measured_on_device"] == 1.0


def test_every_figure_of_the_table_is_an_exact_check_with_its_claim():
    spec = sweep_spec.load("formats")
    exact = {(c.where["number_format"], c.metric): c.expected for c in spec.checks if c.where}
    for name, row in BOOK.items():
        for metric in ("exponent_bits", "mantissa_bits", "storage_bytes"):
            assert exact[(name, metric)] == row[metric], (name, metric)
    assert all(c.kind == "exact" and c.text for c in spec.checks)


def test_the_checks_pass_on_the_book_s_table_and_fail_on_a_changed_figure():
    spec = sweep_spec.load("formats")
    table = pd.DataFrame(spec.published["rows"])
    assert {v.verdict for v in checks.evaluate(spec.checks, table)} == {"PASS"}
    wrong = table.assign(mantissa_bits=table.mantissa_bits.where(table.number_format != "bf16", 10))
    failed = [v.check for v in checks.evaluate(spec.checks, wrong) if v.verdict == "FAIL"]
    assert failed == ["bf16 has 7 mantissa bits"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the tf32 cell runs")
def test_the_sweep_records_the_bits_and_the_report_gives_exact_verdicts(store, tmp_path):
    spec = sweep_spec.load("formats")
    result = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok", "ok", "ok", "skipped"]
    built = report.build(store, spec, "smoke")
    verdicts = {v.check: v.verdict for v in built.verdicts}
    assert verdicts["bf16 has 7 mantissa bits"] == "PASS" and verdicts["fp64 has 11 exponent bits"] == "PASS"
    assert verdicts["tf32 has 10 mantissa bits, as fp16"] == "N/A"
    assert "FAIL" not in verdicts.values()
    assert any("TF32 exists only" in p for p in built.problems)
    report_files.write_files(built, tmp_path)
