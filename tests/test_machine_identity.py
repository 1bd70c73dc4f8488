"""A machine that is recognised: the fingerprint tells apart two CPUs that share a model name, and a
resumed sweep on a machine of another speed (its speed_index) names the cells it reuses."""

from __future__ import annotations

import pytest

from harness.machine import calibration, fingerprint
from harness.machine.calibration import Calibration
from harness.cli.summary import sweep_summary
from harness.sweeps import sweep_engine
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep

# the command a drift note gives for measuring the drifted cells again (the report passes its own)
AGAIN = "harness sweep sparsity --scale quick --remeasure-drifted"

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC
stepping\t: {stepping}
flags\t\t: fpu sse2 avx2 {extra}

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC
stepping\t: {stepping}
flags\t\t: fpu sse2 avx2 {extra}
"""


def _tags(**chip) -> dict[str, str]:
    text = CPUINFO.format(**{"family": 25, "model": 1, "stepping": 1, "extra": "", **chip})
    return {"torch.version": "2", "torch.cuda": "none", "cpu.model": fingerprint.cpu_fields(text)["model name"],
            "cpu.cores": "2", "gpu.names": "none", "gpu.capability": "none", "gpu.driver": "none",
            **fingerprint.cpu_identity(text)}


def test_two_cpus_sharing_a_model_name_have_different_fingerprints():
    milan = _tags()
    genoa, stepping, avx512 = _tags(family=25, model=17), _tags(stepping=2), _tags(extra="avx512f avx512_bf16")
    assert milan["cpu.model"] == genoa["cpu.model"] == "AMD EPYC"
    assert (milan["cpu.family"], milan["cpu.model_id"], milan["cpu.stepping"]) == ("25", "1", "1")
    ids = {fingerprint.fingerprint_of(t) for t in (milan, genoa, stepping, avx512)}
    assert len(ids) == 4
    assert fingerprint.fingerprint_of(_tags()) == fingerprint.fingerprint_of(milan)   # the same chip: the same id
    # flag order is no difference
    assert _tags(extra="b a")["cpu.flags_hash"] == _tags(extra="a b")["cpu.flags_hash"]


def test_this_machines_fingerprint_carries_the_chip_and_the_gpu_fields():
    tags = fingerprint.fingerprint()
    for key in ("cpu.family", "cpu.model_id", "cpu.stepping", "cpu.flags_hash", "gpu.capability", "gpu.driver"):
        assert key in tags


def test_the_speed_index_is_a_positive_rate_and_drift_is_symmetric():
    assert calibration.measure(rounds=2) > 0
    assert calibration.drift(1.0, 1.2) == calibration.drift(1.2, 1.0)
    assert calibration.drifted(1.0, 1.5) and not calibration.drifted(1.0, 1.2)
    assert not calibration.drifted(None, 1.0)


def test_the_calibration_times_calls_until_its_budget_is_spent(monkeypatch):
    import time

    started = time.perf_counter()
    calibration.measure(seconds=0.3)
    assert time.perf_counter() - started >= 0.3
    monkeypatch.setenv("HARNESS_CALIBRATION_S", "0.25")   # the budget a sweep invocation uses
    assert calibration.budget_s() == 0.25
    started = time.perf_counter()
    calibration.measure()
    assert time.perf_counter() - started >= 0.25
    monkeypatch.delenv("HARNESS_CALIBRATION_S")
    assert calibration.budget_s() == calibration.BUDGET_S == 1.0


def test_bench_calibration_counts_pairs_of_processes_it_would_call_drifted():
    import importlib.util

    from harness.folders import REPO_ROOT

    spec = importlib.util.spec_from_file_location("calibration_bench", REPO_ROOT / "benchmarks" / "calibration.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert "drifted (> 44%): 0% of 3" in bench.summary("steady", [100.0, 101.0, 99.0])
    assert "drifted (> 44%): 67% of 3" in bench.summary("unsteady", [100.0, 100.0, 150.0])


def test_a_resumed_sweep_on_a_machine_of_another_speed_names_its_reused_cells(store, sweep_file, monkeypatch):
    spec = sweep_spec.load(str(sweep_file("drift", {"sparsity": [0.0, 0.5]})))
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(10.0))
    first = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.metrics["speed_index"] for r in first.results] == [10.0, 10.0]
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(10.5))   # within the noise floor: nothing to say
    assert run_sweep(spec, store, scale="smoke", show_progress=False).drifted() == []
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(6.0))    # a slower day
    resumed = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in resumed.results] == ["reused", "reused"] and len(resumed.drifted()) == 2
    summary = sweep_summary(resumed)
    assert "2 reused cell(s) were measured at a speed_index more than 44% from today's 6" in summary
    assert "sparsity=0.0" in summary and "--remeasure-drifted" in summary
    again = run_sweep(spec, store, scale="smoke", show_progress=False, remeasure_drifted=True)
    assert [r.outcome for r in again.results] == ["ok", "ok"]
    assert [r.metrics["speed_index"] for r in again.results] == [6.0, 6.0]


def test_a_table_whose_cells_ran_at_different_speeds_says_so():
    from harness.report import tables
    from harness.store import RunRecord

    def run(index, repeat="0"):
        return RunRecord("r", "r", "FINISHED", {"repeat": repeat}, {"speed_index": index}, {}, 0)

    assert tables.drift_note([run(10.0), run(10.5)], AGAIN) is None
    note = tables.drift_note([run(10.0), run(6.0)], AGAIN)
    assert "higher is faster) 6 to 10 (67% apart" in note and "within round(s) 0" in note and f"`{AGAIN}`" in note
    # T6.1's case: three rounds at 279, a fourth added later at 240: between rounds, which pairing divides out
    between = tables.drift_note([run(279.0, r) for r in "012" for _ in range(2)] + [run(150.0, "3")] * 2, AGAIN)
    assert "round 0: 279" in between and "round 3: 150" in between and "does not enter it" in between, between
    assert "--remeasure-drifted" not in between
    # each round was read once (every cell of a round logs its one reading): a move inside a round is not
    # measured, and the note says so rather than "not within one"
    assert "whether it moved within a round is not measured" in between and "not within one" not in between
    # a round resumed in a second sitting is read twice: there, staying within the tolerance is measured
    twice = tables.drift_note([run(279.0, "0"), run(270.0, "0"), run(150.0, "1"), run(152.0, "1")], AGAIN)
    assert "not within one" in twice and "not measured" not in twice, twice


def test_the_report_says_when_its_ratios_mix_machine_speeds(store, sweep_file, monkeypatch):
    from harness.report import tables

    spec = sweep_spec.load(str(sweep_file("mixed_speed", {"sparsity": [0.0, 0.5]})))
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(10.0))
    run_sweep(spec, store, scale="smoke", show_progress=False, select=lambda c: c.config.sparsity == 0.0)
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(5.0))
    run_sweep(spec, store, scale="smoke", show_progress=False)
    built = tables.build(store, spec, "smoke")
    assert "**Machine speed differs across cells**" in built.markdown and "100% apart" in built.markdown


@pytest.mark.multiprocess
def test_workers_log_the_speed_index_their_launcher_measured(sweep_file, tmp_path):
    """Two worker processes run the cells: each cell carries the parent's speed_index (its tag)."""
    from harness.store import Store
    from harness.sweeps.sweep_engine import PARENT_SPEED_TAG

    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    spec = sweep_spec.load(str(sweep_file("worker_speed", {"sparsity": [0.0, 0.5]})))
    result = run_sweep(spec, store, scale="smoke", workers=2, show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok"]
    parent = next(r for r in store.sweep_runs(store.find_experiment("worker_speed"), "worker_speed", parents=True))
    cells = store.sweep_runs(store.find_experiment("worker_speed"), "worker_speed")
    assert {r.metrics["speed_index"] for r in cells} == {float(parent.tags[PARENT_SPEED_TAG])}


def test_the_calibration_runs_again_as_each_round_starts(store, sweep_file, monkeypatch):
    """The machine slows down between rounds: each round's cells carry their own round's speed_index,
    so the drift within a sweep is seen (it was one figure per invocation)."""
    from harness.report import tables

    speeds = iter([10.0, 5.0, 2.5])
    monkeypatch.setattr(sweep_engine, "measure_speed", lambda: Calibration(next(speeds)))
    spec = sweep_spec.load(str(sweep_file("per_round", {"sparsity": [0.0, 0.5]}, repeats=2)))
    result = run_sweep(spec, store, scale="quick", show_progress=False, repeats=2)
    by_round = {(r.cell.config.repeat, r.cell.config.sparsity): r.metrics["speed_index"] for r in result.results}
    assert by_round == {(0, 0.0): 10.0, (0, 0.5): 10.0, (1, 0.0): 5.0, (1, 0.5): 5.0}
    note = tables.build(store, spec, "quick").drift
    assert "round 0: 10" in note and "round 1: 5" in note and "does not enter it" in note


def test_the_drift_tolerance_is_derived_from_the_calibrations_own_noise():
    """Two idle calibrations of one machine (CV 13.1%, docs/MEASUREMENT.md) are not two speeds: the
    tolerance is what 95% of such pairs stay within, not the 10% that called half of them drifted."""
    assert calibration.CALIBRATION_CV == 0.131
    assert 0.43 < calibration.DRIFT_TOLERANCE < 0.45
    assert not calibration.drifted(176.0, 245.0)   # the idle guest's own range in bench-calibration


class _FakeLoad:
    """The load probe, as a machine where other work holds `cores` cores."""
    cores = 0.0

    def finish(self):
        return {"other_busy_cores": type(self).cores, "contended": float(type(self).cores >= 0.5)}


def test_a_calibration_taken_under_load_says_so_and_is_compared_with_none(monkeypatch):
    monkeypatch.setattr(calibration, "LoadWatch", _FakeLoad)
    monkeypatch.setattr(calibration, "measure", lambda: 25.9)
    monkeypatch.setattr(_FakeLoad, "cores", 1.6)
    loaded = calibration.calibrate()
    assert loaded == Calibration(25.9, 1.6) and loaded.under_load
    assert "taken while other work held 1.6 cores" in loaded.text()
    assert loaded.metrics() == {"speed_index": 25.9, "speed_index_other_cores": 1.6}
    monkeypatch.setattr(_FakeLoad, "cores", 0.1)
    monkeypatch.setattr(calibration, "measure", lambda: 55.6)
    idle = calibration.calibrate()
    assert not idle.under_load
    assert not calibration.differ(loaded, idle) and not calibration.differ(idle, loaded)
    assert calibration.differ(Calibration(25.9, 0.1), idle)   # the same figures, both idle: two speeds
    assert calibration.differ(Calibration(25.9), idle)        # a cell from before the load was recorded


def test_a_sweep_resumed_after_a_calibration_under_load_warns_of_no_drift(store, sweep_file, monkeypatch, capsys):
    """The issue's case: the first invocation calibrated while other work held the cores (25.9); the
    same machine idle 15 minutes later (55.6) is not another machine, and nothing says it is."""
    monkeypatch.setattr(calibration, "LoadWatch", _FakeLoad)
    spec = sweep_spec.load(str(sweep_file("loaded_calibration", {"sparsity": [0.0, 0.5]})))
    monkeypatch.setattr(calibration, "measure", lambda: 25.9)
    monkeypatch.setattr(_FakeLoad, "cores", 1.6)
    lines = []
    first = run_sweep(spec, store, scale="smoke", show_progress=False, log=lines.append)
    assert any("taken while other work held 1.6 cores" in line for line in lines), lines
    assert [r.metrics["speed_index_other_cores"] for r in first.results] == [1.6, 1.6]
    monkeypatch.setattr(calibration, "measure", lambda: 55.6)
    monkeypatch.setattr(_FakeLoad, "cores", 0.0)
    resumed = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in resumed.results] == ["reused", "reused"]
    assert resumed.drifted() == [] and not any(r.reason for r in resumed.results)
    assert "speed_index" not in sweep_summary(resumed)


def test_the_drift_note_leaves_out_calibrations_under_load_and_says_what_the_index_is():
    from harness.report import tables
    from harness.store import RunRecord

    def run(index, load=None, repeat="0"):
        metrics = {"speed_index": index} | ({} if load is None else {"speed_index_other_cores": load})
        return RunRecord("r", "r", "FINISHED", {"repeat": repeat}, metrics, {}, 0)

    assert tables.drift_note([run(25.9, 1.6), run(55.6, 0.0)], AGAIN) is None
    note = tables.drift_note([run(25.9, 0.0), run(55.6, 0.0), run(20.0, 1.6)], AGAIN)
    assert "how fast the machine ran a fixed ~1 s matmul-and-convolution calibration" in note
    assert "25.9 to 55.6 (115% apart, more than the 44%" in note
    assert "1 cell(s) whose calibration ran under load are not compared" in note
