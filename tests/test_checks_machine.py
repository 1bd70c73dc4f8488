"""DIFFERS: machine: a check whose claim rests on what the document's machine had (16 cores,
8 GPUs, native bf16, the oneCCL backend) does not FAIL on cells measured without it; it says how the
machines differ. A claim that holds anyway is a PASS, a check with nothing to judge stays N/A."""

from __future__ import annotations

import pandas as pd

from harness.specs.checkkinds import Needs
from harness.report import checks
from harness.report.measured_on import MeasuredOn, measured_on
from harness.store import RunRecord
from harness.store.tracking import OUTCOME, REASON
from harness.specs import sweep_spec

TWO_CORES = {"cpu.cores": "2", "gpu.names": "none", "cpu.native_bf16": "false"}
TABLE = pd.DataFrame({"threads": [1, 2], "train_time_s": [10.0, 6.0], "speedup": [1.0, 10 / 6]})


def _run(params, metrics=None, tags=TWO_CORES, outcome="ok", reason=None):
    tags = {**tags, OUTCOME: outcome, **({REASON: reason} if reason else {})}
    return RunRecord("r", "r", "FINISHED", params, metrics or {}, tags, 0)


def test_the_machine_is_read_from_what_the_cells_logged():
    finished = [_run({"device": "cpu", "dtype": "bf16"}, {"dtype_native": 0.0}),
                _run({"device": "cpu", "dtype": "fp32"}, {"dtype_native": 1.0})]
    skipped = [_run({"backend": "ccl", "world_size": "2"}, outcome="skipped",
                    reason="backend 'ccl' needs Intel's oneCCL bindings (oneccl_bindings_for_pytorch); not on PyPI"),
               _run({"backend": "gloo", "world_size": "8"}, outcome="skipped",
                    reason="8 rank(s) x 2 thread(s) need 16 cores with one thread per core; this process may use 2")]
    facts = measured_on(finished, skipped)
    assert (facts.cores, facts.gpus) == (2, 0)
    assert facts.emulated == {"bf16"} and facts.native == {"fp32"}
    assert list(facts.missing_backends) == ["ccl"]  # gloo's cell skipped for cores, not for its backend
    reasons = facts.lacks(Needs(cores=16, gpus=8, native="bf16", backend="ccl"), "the book's machine")
    assert reasons == [
        "measured on 2 cores; the claim needs 16 (the book's machine)",
        "measured as CPU processes, on no GPU; the claim needs 8 GPU(s) (the book's machine)",
        "bf16 is emulated on the measuring device (its cells logged dtype_native 0); the book's machine "
        "computes it natively",
        "no ccl backend here: backend 'ccl' needs Intel's oneCCL bindings (oneccl_bindings_for_pytorch)",
    ]
    assert facts.lacks(Needs(cores=2, native="fp32", backend="gloo")) == []


def test_gpus_count_only_when_the_cells_ran_on_them():
    tags = {"cpu.cores": "64", "gpu.names": "NVIDIA H100, NVIDIA H100"}
    on_gpus = measured_on([_run({"device": "cuda"}, tags=tags)])
    as_cpu_processes = measured_on([_run({"device": "cpu"}, tags=tags)])
    assert (on_gpus.gpus, as_cpu_processes.gpus) == (2, 0)
    assert on_gpus.lacks(Needs(gpus=8)) == ["measured on 2 GPU(s); the claim needs 8 GPU(s) (the document's machine)"]
    assert on_gpus.lacks(Needs(gpus=2)) == []


def test_what_the_cells_did_not_log_is_not_held_against_them():
    silent = measured_on([_run({}, tags={})])
    assert silent.lacks(Needs(cores=16, gpus=8, native="bf16", backend="ccl")) == []
    # a CPU with native bf16 (AMX) does not emulate it, and a GPU machine's CPU flags say nothing of its GPUs
    amx = measured_on([_run({"device": "cpu"}, tags={**TWO_CORES, "cpu.native_bf16": "true"})])
    gpu = measured_on([_run({"device": "cuda"}, tags={**TWO_CORES, "gpu.names": "NVIDIA A100"})])
    assert amx.lacks(Needs(native="bf16")) == [] and gpu.lacks(Needs(native="bf16")) == []


def test_a_failing_check_on_a_lesser_machine_differs_and_a_passing_one_passes():
    floor = {"kind": "bound", "metric": "speedup", "where": {"threads": 2}, "needs": {"cores": 16}}
    fails, passes = ({**floor, "min": 3.0}, {**floor, "min": 1.5})
    small, big = MeasuredOn(cores=2), MeasuredOn(cores=16)
    on_small = checks.evaluate([fails, passes], TABLE, measured=small, machine="the book's 16-core machine")
    assert [v.verdict for v in on_small] == ["DIFFERS: machine", "PASS"]
    assert on_small[0].detail == ("measured 1.67; measured on 2 cores; the claim needs 16 (the book's 16-core machine): that "
                                  "predicts a smaller speedup, and ours is smaller than the claim")
    assert [v.stand_in for v in on_small] == [True, True] and on_small[1].label == "PASS (stand-in)"
    assert [v.verdict for v in checks.evaluate([fails], TABLE, measured=big)] == ["FAIL"]
    assert [v.verdict for v in checks.evaluate([{k: v for k, v in fails.items() if k != "needs"}], TABLE,
                                               measured=small)] == ["FAIL"]  # no need stated: a plain FAIL
    assert [v.verdict for v in checks.evaluate([fails], TABLE)] == ["FAIL"]  # nothing known of the machine


def test_a_check_with_nothing_to_judge_stays_na_and_names_what_is_missing():
    ccl = {"kind": "compare", "metric": "train_time_s", "where": {"backend": "ccl"}, "against": {"backend": "gloo"},
           "max_ratio": 0.97, "needs": {"backend": "ccl"}}
    facts = MeasuredOn(missing_backends={"ccl": "oneccl_bindings_for_pytorch is not installed"})
    table = pd.DataFrame({"backend": ["gloo"], "train_time_s": [5.0]})
    verdict = checks.evaluate([ccl], table, axes=["backend"], measured=facts)[0]
    assert verdict.verdict == "N/A" and "no ccl backend here: oneccl_bindings_for_pytorch is not installed" in verdict.detail


def test_the_report_and_its_summary_count_differs_apart(store, tmp_path, monkeypatch, sweep_file):
    """End to end on the real store: this machine's cores are read back from the cells' fingerprint."""
    from harness.report.reproduction import write_reproduction
    from harness.sweeps.sweep_engine import run_sweep

    published = """[published]
machine = "a machine with a million cores"
rows = [ { sparsity = 0.0, train_time_s = 100 } ]
[[checks]]
kind = "bound"
metric = "train_time_s"
max = 0.0
needs = { cores = 1000000 }
text = "trains in no time on a million cores"
[[checks]]
kind = "bound"
metric = "train_time_s"
max = 0.0
text = "trains in no time anywhere"
"""
    path = sweep_file("differs", {"sparsity": [0.0]}, published=published)
    monkeypatch.setattr(sweep_spec, "SWEEPS_DIR", path.parent)
    run_sweep(sweep_spec.load("differs"), store, show_progress=False)
    written, summary = write_reproduction(store, tmp_path / "out")
    assert summary.endswith("checks: book timings 1 FAIL; stand-ins 1 DIFFERS: machine")
    text = written.read_text()
    assert "| trains in no time on a million cores | **DIFFERS: machine** |" in text
    assert "cores; the claim needs 1000000 (a machine with a million cores): that predicts a longer train_time_s" in text


def test_a_stand_in_that_misses_on_the_side_its_machine_does_not_predict_stays_a_fail():
    """Fewer cores predict a smaller speed-up; a speed-up above the claim's ceiling is not explained
    by them, so it is a FAIL (labelled a stand-in), never DIFFERS."""
    ceiling = {"kind": "bound", "metric": "speedup", "where": {"threads": 2}, "max": 1.2, "needs": {"cores": 16}}
    verdict = checks.evaluate([ceiling], TABLE, measured=MeasuredOn(cores=2))[0]
    assert (verdict.verdict, verdict.label, verdict.side) == ("FAIL", "FAIL (stand-in)", "high")
    assert "predicts the other side" in verdict.detail
    slower = {"kind": "bound", "metric": "train_time_s", "max": 1.0, "needs": {"cores": 16}}   # a time: longer
    assert checks.evaluate([slower], TABLE, measured=MeasuredOn(cores=2))[0].verdict == "DIFFERS: machine"
