"""D12.3 and its exercises 2, 3 and 5 on a machine without a GPU: what can be checked here is the
arithmetic of the verdicts, where copies land, the published figures derived from d2l's seconds, and
that every GPU cell of the four sweeps is a recorded skip with its reason (the sweep goes on)."""

from __future__ import annotations

import pytest
import torch

from experiments import autoparallel
from experiments.overlap import hidden_share, host_copies
from experiments import make_config
from harness.errors import CellSkipped
from harness.report import checks
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep
from harness.store.tracking import OUTCOME, REASON
from conftest import mlflow_client

SWEEPS = ["autoparallel", "autoparallel-small-ops", "autoparallel-cpu-gpu", "autoparallel-dependencies"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the cells run")


@no_gpu
@pytest.mark.parametrize("case, gpus", sorted(autoparallel.GPUS_NEEDED.items()))
def test_every_case_without_a_gpu_is_a_skip_naming_what_it_needs(case, gpus):
    with pytest.raises(CellSkipped, match=f"D12.3 {case} needs {gpus} GPU\\(s\\) and device=cuda; this machine has 0"):
        autoparallel.run(make_config({"experiment": "autoparallel", "device": "cuda", "autopar_case": case}))


@no_gpu
@pytest.mark.parametrize("name", SWEEPS)
def test_each_sweep_records_every_cell_as_a_skip_with_its_reason_and_goes_on(name, store):
    spec = sweep_spec.load(name)
    result = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert result.results and all(r.outcome == "skipped" for r in result.results)
    for r in result.results:
        tags = mlflow_client(store).get_run(r.run_id).data.tags
        assert tags[OUTCOME] == "skipped" and "needs" in tags[REASON] and "GPU(s)" in tags[REASON]


def test_the_d12_3_grid_keeps_d2l_s_pair_and_compares_each_other_pair_in_one_memory():
    cells = sweep_spec.expand(sweep_spec.load("autoparallel"), "full")
    copies = [(c.config.autopar_host_memory, c.config.autopar_copy_stream)
              for c in cells if c.config.autopar_case == "compute_copy"]
    assert copies == [("pageable_then_pinned", "compute"), ("pinned", "compute"), ("pageable", "separate"),
                      ("pinned", "separate")]
    assert [c.config.autopar_case for c in cells].count("two_devices") == 1


def test_the_exercise_sweeps_vary_what_their_exercise_asks():
    small = sweep_spec.expand(sweep_spec.load("autoparallel-small-ops"), "full")
    assert {c.config.autopar_case for c in small} == {"small_ops"}
    assert [c.config.autopar_size for c in small] == sorted(c.config.autopar_size for c in small)
    both = sweep_spec.expand(sweep_spec.load("autoparallel-cpu-gpu"), "full")
    assert {(c.config.autopar_case, c.config.autopar_host_memory) for c in both} == {
        ("cpu_gpu", "pageable"), ("cpu_gpu", "pinned")}
    dependent = sweep_spec.expand(sweep_spec.load("autoparallel-dependencies"), "full")
    assert {c.config.autopar_case for c in dependent} == {"dependencies"} and len(dependent) >= 3


def test_hidden_share_is_zero_for_serial_one_for_perfect_overlap_and_flags_d2l_s_memory_change():
    assert hidden_share([2.0, 1.0], 3.0) == 0.0
    assert hidden_share([2.0, 1.0], 2.0) == 1.0
    assert hidden_share([2.0, 1.0, 1.0], 2.5) == pytest.approx(0.75)
    # d2l: 1.6285 s compute + 2.5801 s copy done in 1.9456 s hides more than the shorter part: no overlap
    # alone can do that; its overlapped copies went to faster pinned memory.
    assert hidden_share([1.6285, 2.5801], 1.9456) > 1.3


def test_the_published_gains_are_computed_from_d2l_s_printed_seconds():
    rows = {r["autopar_case"]: r for r in sweep_spec.load("autoparallel").published["rows"]}
    two, copy = rows["two_devices"], rows["compute_copy"]
    parts = [two["gpu0_time_s"], two["gpu1_time_s"]]
    assert two["overlap_gain"] == round(sum(parts) / two["both_time_s"], 4)
    assert two["overlap_hidden_share"] == round(hidden_share(parts, two["both_time_s"]), 4)
    parts = [copy["compute_time_s"], copy["copy_time_s"]]
    assert copy["overlap_gain"] == round(sum(parts) / copy["overlapped_time_s"], 4)
    assert copy["overlap_hidden_share"] == round(hidden_share(parts, copy["overlapped_time_s"]), 4)


def test_the_baseline_and_the_overlapped_run_copy_into_the_same_buffers():
    y = torch.randn(4, 4)
    baseline, overlapped = host_copies("pageable", 4, 2)
    first, second = baseline(1, y), overlapped(1, 2 * y)
    assert first.data_ptr() == second.data_ptr() and torch.equal(second, 2 * y)
    assert not first.is_pinned()
    assert baseline(0, y).data_ptr() != first.data_ptr()  # one buffer per product


def test_the_d12_3_checks_pass_on_d2l_s_figures_and_fail_on_serial_execution():
    import pandas as pd

    spec = sweep_spec.load("autoparallel")
    published = pd.DataFrame(spec.published["rows"])
    verdicts = {v.check: v.verdict for v in checks.evaluate(spec.checks, published)}
    assert verdicts["two GPUs queued without a synchronize: at least 1.5x faster than one after the other (d2l: 1.92x)"] == "PASS"
    assert verdicts["two GPUs queued without a synchronize hide at least 80% of the shorter run, and no more than all of it (d2l: 98%)"] == "PASS"
    serial = published.assign(both_time_s=published.gpu0_time_s + published.gpu1_time_s,
                              overlap_gain=1.0, overlap_hidden_share=0.0)
    assert {v.verdict for v in checks.evaluate(spec.checks, serial) if v.verdict != "N/A"} == {"FAIL"}
