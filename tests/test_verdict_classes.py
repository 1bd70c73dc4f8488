"""Verdict classes that mean what they say: a check on settings its claim does not assume is N/A, a
stand-in data set or dtype is labelled, the project's goals and consistency checks are counted
apart from published claims, "native" comes from the measured peaks (fp16 and bf16 alike), and a
2-device ratio cannot pass above the physical 2x. (The three checks added with them can fail:
tests/test_checks_can_fail.py.)"""

from __future__ import annotations

import pandas as pd
import pytest

from harness.errors import UserError
from harness.specs.checkkinds import Needs
from harness.report import checks
from harness.report.measured_on import measured_on
from harness.store import RunRecord
from harness.store.tracking import OUTCOME
from harness.specs import sweep_spec

PARAMS = {"kind": "exact", "metric": "param_count", "where": {"sparsity": 0.5}, "expected": 1059306,
          "assumes": {"model": "cnn"}, "text": "50% sparsity leaves 1,059,306 parameters"}
TABLE = pd.DataFrame({"sparsity": [0.5], "param_count": [1059306], "repeats": [3]})


def test_a_check_on_a_model_its_claim_does_not_assume_is_na():
    """A smoke sweep with --set model=tiny_cnn turned the book CNN's parameter count into a FAIL."""
    tiny = TABLE.assign(param_count=[8000])
    verdict = checks.evaluate([PARAMS], tiny, axes=["sparsity"], scale="smoke", repeats=1,
                              settings={"model": {"tiny_cnn"}})[0]
    assert verdict.verdict == checks.Judgement.NA and "assumes model=cnn" in verdict.detail and "tiny_cnn" in verdict.detail
    book = checks.evaluate([PARAMS], TABLE, axes=["sparsity"], scale="smoke", repeats=1, settings={"model": {"cnn"}})
    assert book[0].verdict == checks.Judgement.PASS
    wrong = checks.evaluate([PARAMS], tiny, axes=["sparsity"], scale="smoke", repeats=1, settings={"model": {"cnn"}})
    assert wrong[0].verdict == checks.Judgement.FAIL


def test_a_stand_in_data_set_or_dtype_is_judged_and_labelled():
    check = {"kind": "bound", "metric": "train_flops", "min": 1.0, "assumes": {"dataset": "cifar10", "dtype": "fp16"},
             "stand_ins": {"dataset": "imagefolder", "dtype": "bf16"}, "text": "some claim"}
    table = pd.DataFrame({"train_flops": [2.0]})
    standing = checks.evaluate([check], table, settings={"dataset": {"imagefolder"}, "dtype": {"bf16"}})[0]
    assert standing.verdict == checks.Judgement.PASS and standing.stand_in and standing.label == "PASS (stand-in)"
    assert "dataset imagefolder for cifar10" in standing.detail and "dtype bf16 for fp16" in standing.detail
    assert "stand-ins 1 PASS" in checks.count_line([standing])
    other = checks.evaluate([check], table, settings={"dataset": {"digits"}, "dtype": {"bf16"}})[0]
    assert other.verdict == checks.Judgement.NA and "digits" in other.detail
    assert not checks.evaluate([check], table, settings={"dataset": {"cifar10"}, "dtype": {"fp16"}})[0].stand_in


@pytest.mark.parametrize("assumes, stand_ins, said", [
    ('{ modle = "cnn" }', "", "modle"),                                        # misspelt: never logged
    ('{ model = "cnn" }', '{ dataset = "imagefolder" }', "stand_ins names dataset"),   # stands in for nothing
])
def test_a_check_assuming_a_setting_no_cell_logs_is_refused_when_the_file_is_read(sweep_file, assumes, stand_ins, said):
    check = ('\n[[checks]]\nkind = "exact"\nmetric = "param_count"\nexpected = 1\n'
             f"assumes = {assumes}\n" + (f"stand_ins = {stand_ins}\n" if stand_ins else ""))
    path = sweep_file("assumed", {"sparsity": [0.0]}, published=check)
    with pytest.raises(UserError, match=said) as caught:
        sweep_spec.load(str(path))
    assert "assumed.toml, check 'exact check of param_count'" in str(caught.value), caught.value
    good = sweep_file("assumed", {"sparsity": [0.0]}, published=check.replace(assumes, '{ model = "cnn" }')
                      .replace(f"stand_ins = {stand_ins}\n", ""))
    assert sweep_spec.load(str(good)).checks[0].assumes == {"model": "cnn"}


def test_goals_and_consistency_checks_are_counted_apart_from_claims():
    table = pd.DataFrame({"share": [1.0]})
    verdicts = checks.evaluate([{"kind": "bound", "metric": "share", "min": 0.9, "claim": "consistency"},
                                {"kind": "bound", "metric": "share", "max": 0.5, "claim": "goal"},
                                {"kind": "bound", "metric": "share", "min": 0.5}], table)
    assert checks.count_line(verdicts) == "measured claims 1 PASS; project goals 1 FAIL; consistency 1 PASS"


def test_the_shipped_goal_and_consistency_checks_are_marked():
    claims = {name: {c.text: c.claim for c in sweep_spec.load(name).checks} for name in
              ("airbench", "async", "resnet-lr", "resnet-epochs")}
    assert claims["airbench"]["airbench94 reaches 94% within 60 minutes of training on this CPU"] == "goal"
    assert [c for c in claims["async"].values()].count("consistency") == 1
    assert "consistency" in claims["resnet-lr"].values() and "consistency" in claims["resnet-epochs"].values()


def test_a_two_device_ratio_cannot_pass_above_2x():
    """Within 30% of the book's 1.80x allowed up to 2.34x, more than two devices can give."""
    check = {"kind": "ratio", "metric": "speedup", "tolerance": 0.3, "max": 2.0}
    table = pd.DataFrame({"speedup": [2.2], "book_speedup": [1.8]})
    capped = checks.evaluate([check], table)[0]
    assert capped.verdict == checks.Judgement.FAIL and capped.side == "high"
    assert checks.evaluate([{**check, "max": None}], table)[0].verdict == checks.Judgement.PASS
    assert checks.evaluate([check], table.assign(speedup=[1.9]))[0].verdict == checks.Judgement.PASS
    for name in ("gpus", "resnet"):
        two = [c for c in sweep_spec.load(name).checks if c.kind == "ratio" and (c.where or {}).get("world_size") == 2]
        assert two and all(c.max is not None and c.max <= 2 for c in two), name


def _cell(dtype: str, peak: float, native: float = 1.0) -> RunRecord:
    return RunRecord(dtype, dtype, "FINISHED", {"dtype": dtype, "device": "cpu"},
                     {"peak_tflops": peak, "peak_devices": 1.0, "dtype_native": native},
                     {OUTCOME: "ok", "cpu.cores": "2", "gpu.names": "none", "cpu.native_bf16": "true"}, 0)


def test_native_is_decided_by_the_measured_peak_for_fp16_and_bf16_alike():
    """The Intel host: AVX512-FP16 set (dtype_native 1), yet fp16's peak 0.83x fp32's; bf16's 7.2x."""
    facts = measured_on([_cell("fp32", 0.451), _cell("bf16", 3.246), _cell("fp16", 0.376)])
    assert facts.native >= {"bf16"} and "fp16" in facts.emulated
    assert facts.lacks(Needs(native="bf16")) == []
    reason = facts.lacks(Needs(native="fp16"))
    assert len(reason) == 1 and "0.83x fp32's" in reason[0]
    # a flag that says emulated does not outvote a peak at least fp32's
    assert measured_on([_cell("fp32", 0.45), _cell("bf16", 0.9, native=0.0)]).lacks(Needs(native="bf16")) == []


def test_fp16_and_bf16_speed_ups_are_judged_by_one_rule():
    spec = sweep_spec.load("amp")
    rules = [c for c in spec.checks if c.metric == "speedup"]
    assert sorted(c.where["dtype"] for c in rules) == ["bf16", "fp16"]
    assert len({(c.kind, tuple(c.scales)) for c in rules}) == 1 and all(c.needs.native for c in rules)
