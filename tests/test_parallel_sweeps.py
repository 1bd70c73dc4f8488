"""Compound grid axes, per-scale grids, speed-up per series and parallel efficiency in reports,
and D12.5's hand-written data parallel checked against one device."""

from __future__ import annotations


import pytest
import torch

from experiments import dp_scratch
from harness.report import report_files, tables as report
from harness.specs import sweep_spec
from experiments import make_config
from harness.errors import CellSkipped, UserError
from harness.sweeps.sweep_engine import run_sweep

LAYOUT_SWEEP = """\
name = "{name}"
title = "layouts"
experiment = "data_parallel"
[base]
model = "tiny_cnn"
dataset = "synthetic"
train_limit = 64
test_limit = 32
epochs = 1
warmup_epochs = 0
[grid]
layout = [ {{ world_size = 1, threads = 1 }}, {{ world_size = 1, threads = 2 }} ]
batch_size = [32, 16]
[scales.smoke]
epochs = 1
[scales.smoke.grid]
layout = [ {{ world_size = 1, threads = 1 }}, {{ world_size = 1, threads = 2 }}, {{ world_size = 1, threads = 64 }} ]
[report]
x = "threads"
baseline = {{ threads = 1 }}
workers = "threads"
series = "batch_size"
metrics = ["train_time_s", "test_accuracy"]
[published]
rows = [
  {{ world_size = 1, threads = 1, batch_size = 32, train_time_s = 100 }},
  {{ world_size = 1, threads = 2, batch_size = 32, train_time_s = 60 }},
]
"""


def _spec(tmp_path, name="layouts"):
    path = tmp_path / f"{name}.toml"
    path.write_text(LAYOUT_SWEEP.format(name=name))
    return sweep_spec.load(str(path))


def test_a_compound_axis_varies_fields_together_and_a_scale_can_replace_it(tmp_path):
    spec = _spec(tmp_path)
    full = sweep_spec.expand(spec, "full")
    assert [(c.config.world_size, c.config.threads, c.config.batch_size) for c in full] == [
        (1, 1, 32), (1, 1, 16), (1, 2, 32), (1, 2, 16)]
    assert full[2].label == "world_size=1 threads=2 batch_size=32"
    assert len(sweep_spec.expand(spec, "smoke")) == 6
    assert spec.axes() == ["world_size", "threads", "batch_size"]
    with pytest.raises(UserError, match="grid axis 'layout'"):
        sweep_spec.expand(spec, "full", {"threads": 4})


def test_report_gives_speedup_and_efficiency_per_series_with_skips_listed(tmp_path, store, monkeypatch):
    spec = _spec(tmp_path, "layouts_report")
    monkeypatch.setattr("harness.machine.hardware.usable_cores", lambda: [0, 1])
    result = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok", "ok", "ok", "skipped", "skipped"]
    built = report.build(store, spec)
    t = built.table.set_index(["threads", "batch_size"])
    for batch in (32, 16):
        base = t.loc[(1, batch), "train_time_s"]
        assert t.loc[(2, batch), "speedup"] == pytest.approx(base / t.loc[(2, batch), "train_time_s"])
        assert t.loc[(2, batch), "efficiency"] == pytest.approx(t.loc[(2, batch), "speedup"] / 2)
    assert t.loc[(2, 32), "book_speedup"] == pytest.approx(100 / 60)
    assert t.loc[(2, 32), "book_efficiency"] == pytest.approx(100 / 60 / 2)
    assert any("64 threads need 64 cores" in p or "threads=64 is more than" in p for p in built.problems)
    assert "| efficiency |" in built.markdown and "| 1 | 2 | 32 |" in built.markdown
    report_files.write_files(built, tmp_path)


@pytest.fixture
def scratch_cfg():
    return {"experiment": "dp_scratch", "model": "lenet_d2l", "dataset": "synthetic", "train_limit": 128,
            "test_limit": 64, "epochs": 2, "warmup_epochs": 0, "batch_size": 32, "lr": 0.2, "threads": 1}


def test_hand_written_data_parallel_gives_one_devices_parameters(scratch_cfg):
    metrics = dp_scratch.run(make_config({**scratch_cfg, "world_size": 2, "dp_impl": "scratch"}))
    assert metrics["params_match"] == 1.0 and metrics["first_step_param_diff"] < 1e-6
    assert metrics["max_param_diff"] < 1e-4  # 8 steps on tiny data: rounding has not grown much yet
    assert metrics["copies_identical"] == 1.0


def test_a_wrong_allreduce_would_be_caught(scratch_cfg, monkeypatch):
    """The checks can fail: without the allreduce each copy steps on its own shard's gradient;
    summing without sending the sum back leaves the copies apart."""
    monkeypatch.setattr(dp_scratch, "allreduce", lambda grads: None)
    metrics = dp_scratch.run(make_config({**scratch_cfg, "world_size": 2, "dp_impl": "scratch"}))
    assert metrics["params_match"] == 0.0 and metrics["copies_identical"] == 0.0

    def sum_without_broadcast(grads):
        for g in grads[1:]:
            grads[0][:] += g
    monkeypatch.setattr(dp_scratch, "allreduce", sum_without_broadcast)
    metrics = dp_scratch.run(make_config({**scratch_cfg, "world_size": 2, "dp_impl": "scratch"}))
    assert metrics["params_match"] == 1.0 and metrics["copies_identical"] == 0.0


def test_split_batch_and_allreduce_by_hand():
    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    shards = dp_scratch.split_batch(x, y, 2)
    assert [s[1].tolist() for s in shards] == [[0, 1, 2], [3, 4, 5]]
    grads = [torch.ones(3), 2 * torch.ones(3), 3 * torch.ones(3)]
    dp_scratch.allreduce(grads)
    assert all(g.tolist() == [6.0, 6.0, 6.0] for g in grads)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ddp_on_two_ranks_gives_one_devices_parameters(dp_scratch_ddp_without_warmup):
    metrics = dp_scratch_ddp_without_warmup   # two gloo ranks (conftest.py: one run shared with test_warmup)
    assert metrics["params_match"] == 1.0 and metrics["first_step_param_diff"] < 1e-6
    assert metrics["train_time_s"] == max(metrics["rank0_train_time_s"], metrics["rank1_train_time_s"])


def test_autoparallel_without_gpus_is_a_skip_with_its_reason():
    from experiments import autoparallel

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs")
    with pytest.raises(CellSkipped, match="needs 2 GPU"):
        autoparallel.run(make_config({"experiment": "autoparallel", "device": "cuda"}))
    with pytest.raises(CellSkipped, match="needs 1 GPU"):
        autoparallel.run(make_config({"experiment": "autoparallel", "autopar_case": "compute_copy"}))
