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
from harness.report import checks, evidence
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
    assert "stand-ins 1 PASS" in evidence.count_line([standing])
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
    assert evidence.count_line(verdicts) == "measured claims 1 PASS; consistency 1 PASS; project goals 1 FAIL"


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


def _verdict(verdict, kind="bound", metric="speedup", claim="published", stand_in=False, check="c"):
    return checks.Verdict(check, checks.Judgement(verdict), "", kind, stand_in, claim=claim, metric=metric)


def test_each_verdict_is_in_one_class_and_a_check_that_cannot_fail_is_a_fact():
    from harness.report import evidence

    assert evidence.of(_verdict("PASS")) == evidence.BOOK_TIMING
    assert evidence.of(_verdict("PASS", metric="test_accuracy")) == evidence.MEASURED
    assert evidence.of(_verdict("PASS", stand_in=True)) == evidence.STAND_IN
    assert evidence.of(_verdict("PASS", kind="exact", metric="param_count")) == evidence.EXACT
    assert evidence.of(_verdict("PASS", kind="ratio", metric="train_flops", claim="computed")) == evidence.COMPUTED
    assert evidence.of(_verdict("PASS", claim="consistency", stand_in=True)) == evidence.CONSISTENCY
    # the shipped checks that cannot fail by the machine's noise are facts, never measured claims
    shipped = {name: {c.text: c for c in sweep_spec.load(name).checks} for name in ("airbench", "hybridize", "dp-scratch")}
    computed = [c for checks_ in shipped.values() for c in checks_.values() if c.claim == "computed"]
    assert {c.metric for c in computed} == {"train_flops", "max_abs_diff_vs_eager", "params_match"}
    assert all(c.kind == "exact" for c in sweep_spec.load("formats").checks)


def test_the_counts_are_class_by_class_with_the_undecided_in_each():
    from harness.report import evidence

    verdicts = [_verdict("PASS"), _verdict("INCONCLUSIVE"), _verdict("FAIL", stand_in=True),
                _verdict("PASS", kind="exact", metric="bits"), _verdict("N/A"), _verdict("PASS", claim="computed")]
    assert evidence.count_line(verdicts) == ("book timings 1 PASS, 1 inconclusive; stand-ins 1 FAIL; exact facts 1 PASS; "
                                             "computed facts 1 PASS; 1 N/A")
    assert evidence.count_pairs([(evidence.of(v), str(v.verdict)) for v in verdicts]) == evidence.count_line(verdicts)


def test_a_tables_headline_is_a_document_claim_even_undecided_never_a_fact_above_it():
    """D12.1's glance showed its output match (a computed fact) above the undecided TorchScript claim."""
    from harness.report import evidence

    fact, claim = _verdict("PASS", claim="computed", check="outputs match"), _verdict("INCONCLUSIVE", check="faster")
    assert evidence.headline([fact, _verdict("N/A", check="gpu"), claim]) is claim
    assert evidence.headline([fact, _verdict("N/A", check="gpu")]) is fact
    unjudged = _verdict("N/A", check="gpu")
    assert evidence.headline([_verdict("N/A", kind="exact", check="bits"), unjudged]) is unjudged


def test_an_accuracy_on_the_jpeg_images_is_a_stand_in_and_a_time_on_them_is_not():
    """The images are decoded once before any clock, so a time on the JPEGs is the book's timing; an
    accuracy on them is the JPEG data's, a stand-in for the original arrays."""
    from harness.report import evidence

    spec = sweep_spec.load("sparsity")
    text = {c.text.split(" (")[0]: c for c in spec.checks}
    table = pd.DataFrame({"sparsity": [0.0, 0.4, 0.8], "train_time_s": [60.0, 40.0, 20.0],
                          "test_accuracy": [0.40, 0.38, 0.31], "repeats": [1, 1, 1]})
    for dataset, accuracy_class in (("imagefolder", evidence.STAND_IN), ("cifar10", evidence.MEASURED)):
        time, accuracy = checks.evaluate([text["training time falls as sparsity rises"],
                                          text["accuracy falls as sparsity rises"]], table,
                                         settings={"dataset": {dataset}, "model": {"cnn"}})
        assert evidence.of(time) == evidence.BOOK_TIMING and evidence.of(accuracy) == accuracy_class


def test_a_speed_up_interval_stops_at_what_its_workers_allow():
    """Two devices cannot be more than twice as fast as one: D12.6's 1.93x [1.77, 2.10] is cut at 2."""
    from harness.report.tables import _cut_at_workers

    table = pd.DataFrame({"world_size": [1, 2, 2], "speedup_lo": [float("nan"), 1.77, 2.3],
                          "speedup_hi": [float("nan"), 2.10, 2.6]})
    _cut_at_workers(table, {"world_size": 1}, "world_size")
    assert table["speedup_hi"].tolist()[1:] == [2.0, 2.0] and table["speedup_lo"].tolist()[1:] == [1.77, 2.0]


def test_every_committed_page_counts_its_verdicts_class_by_class():
    """The counts at the top of each committed page are its verdicts.csv's, class by class, and each
    of its tables has one headline claim (the line the glance shows)."""
    from harness.folders import REPO_ROOT
    from harness.report import evidence, verdict_file

    found = sorted((REPO_ROOT / "results").rglob(verdict_file.NAME))
    assert len(found) >= 5
    for path in found:
        lines = verdict_file.read(path)
        assert {line["class"] for line in lines} <= set(evidence.CLASSES), path
        counts = evidence.count_pairs([(line["class"], line["verdict"]) for line in lines])
        assert f"; checks: {counts}.**" in (path.parent / "REPRODUCTION.md").read_text(), path
        for table in {line["table"] for line in lines}:
            assert sum(line["headline"] == "1" for line in lines if line["table"] == table) == 1, (path, table)
