"""The documents' settings, exactly: EfficientNet with its 1000-class head and, for T10.2,
ImageNet weights (never silently random ones); T7's TF32 flag as the book's notebook; D12.2's
unrounded figures and its time.sleep(5) variant."""

from __future__ import annotations

import urllib.error

import pandas as pd
import pytest
import torch

import experiments.asynchronous
from experiments import data_parallel
from harness.training import models
from experiments import make_config
from harness.errors import CellSkipped, UserError
from harness.training.models import build_model, count_parameters, fetch_weights, weights_path
from harness.report import checks, tables as report
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep
from harness.store.tracking import OUTCOME, REASON
from conftest import mlflow_client


# --- EfficientNet as the book builds it --------------------------------------------------------------
def test_efficientnet_keeps_its_1000_class_head_whatever_the_dataset():
    net = build_model("efficientnet_b0", num_classes=10)
    assert net(torch.rand(2, 3, 32, 32)).shape == (2, 1000)
    assert count_parameters(net) == 5_288_548  # torchvision's efficientnet_b0() as is
    assert build_model("cnn", num_classes=10).fc2.out_features == 10  # the book's CNN has 10 outputs


@pytest.mark.slow
def test_efficientnet_b7_is_torchvision_s_default_model():
    import torchvision

    assert count_parameters(build_model("efficientnet_b7")) == count_parameters(torchvision.models.efficientnet_b7())


def test_pretrained_on_a_model_without_weights_is_one_sentence():
    with pytest.raises(UserError, match="model cnn has no published weights to start from; set pretrained=false "
                                        "or choose one of efficientnet_b0, efficientnet_b7"):
        make_config({"experiment": "data_parallel", "model": "cnn", "pretrained": True})


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    """An empty torch hub cache and no network: every download fails as it does offline."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))

    def offline(url, dst, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    return tmp_path


def test_weights_that_cannot_be_fetched_are_a_skip_naming_the_cache_and_the_url(empty_hub):
    with pytest.raises(CellSkipped) as skip:
        fetch_weights("efficientnet_b7")
    text = str(skip.value)
    assert "EfficientNet_B7_Weights.DEFAULT for efficientnet_b7 is not in the torch hub cache" in text
    assert str(empty_hub / "checkpoints") in text and "https://" in text and "name resolution" in text
    assert "random weights" in text


def test_weights_in_the_cache_are_used_without_a_download(empty_hub):
    path = weights_path("efficientnet_b7")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"cached")
    assert fetch_weights("efficientnet_b7") == path  # the offline download would have raised


def test_a_pretrained_cell_without_its_weights_is_skipped_before_any_rank_starts(empty_hub, monkeypatch):
    monkeypatch.setattr(data_parallel, "check_can_run", lambda cfg: None)  # whatever this machine's cores
    monkeypatch.setattr(data_parallel, "launch", lambda *a, **k: pytest.fail("ranks started without weights"))
    cfg = make_config({"experiment": "data_parallel", "model": "efficientnet_b0", "pretrained": True,
                       "dataset": "synthetic", "world_size": 2, "threads": 1})
    with pytest.raises(CellSkipped, match="EfficientNet_B0_Weights.DEFAULT"):
        data_parallel.run(cfg)


def test_the_t10_2_sweep_asks_for_imagenet_weights_and_records_the_skip(empty_hub, store, tmp_path):
    spec = sweep_spec.load("gpus")
    assert {c.config.pretrained for c in sweep_spec.expand(spec, "full")} == {True}
    assert {c.config.model for c in sweep_spec.expand(spec, "full")} == {"efficientnet_b7"}
    assert {c.config.pretrained for c in sweep_spec.expand(spec, "smoke")} == {False}  # the CNN has none
    one = tmp_path / "weights.toml"
    one.write_text('name = "pretrained_weights"\nexperiment = "data_parallel"\n[base]\nmodel = "efficientnet_b0"\n'
                   'pretrained = true\ndataset = "synthetic"\ntrain_limit = 64\ntest_limit = 32\nepochs = 1\n'
                   'batch_size = 32\ndevice = "cpu"\nthreads = 1\n[grid]\nlr = [0.001, 0.01]\n')
    result = run_sweep(sweep_spec.load(str(one)), store, scale="full", show_progress=False)
    assert [r.outcome for r in result.results] == ["skipped", "skipped"]  # and the sweep went on
    tags = mlflow_client(store).get_run(result.results[0].run_id).data.tags
    assert tags[OUTCOME] == "skipped" and "EfficientNet_B0_Weights.DEFAULT" in tags[REASON]


# --- T7's backend flags ------------------------------------------------------------------------------
def test_t7_turns_tf32_on_for_every_dtype_as_the_book():
    cells = sweep_spec.expand(sweep_spec.load("amp"), "full")
    assert {c.config.dtype for c in cells} == {"fp32", "bf16", "fp16"}
    assert all(c.config.allow_tf32 and c.config.cudnn_benchmark and c.config.reduced_precision_reduction
               for c in cells)


# --- D12.2: the unrounded figures and the sleep -------------------------------------------------------
def test_d12_2_publishes_the_notes_unrounded_cpu_figures_with_and_without_the_sleep():
    rows = {(r["device"], r["async_pause_s"]): r for r in sweep_spec.load("async").published["rows"]}
    assert (rows[("cpu", 0.0)]["numpy_time_s"], rows[("cpu", 0.0)]["torch_nosync_time_s"]) == (0.9737, 0.2859)
    assert (rows[("cpu", 5.0)]["numpy_time_s"], rows[("cpu", 5.0)]["torch_nosync_time_s"]) == (0.9414, 0.2103)


def test_the_pause_sleeps_between_numpy_and_torch_outside_both_clocks(monkeypatch):
    order = []
    real_numpy, real_torch = experiments.asynchronous.numpy_round, experiments.asynchronous.torch_round
    monkeypatch.setattr(experiments.asynchronous, "numpy_round",
                        lambda *a: order.append("numpy") or real_numpy(*a))
    monkeypatch.setattr(experiments.asynchronous, "torch_round",
                        lambda *a: order.append("torch") or real_torch(*a))
    monkeypatch.setattr(experiments.asynchronous.time, "sleep", lambda s: order.append(f"sleep {s}"))
    cfg = make_config({"experiment": "async", "matrix_size": 32, "matmul_iterations": 2, "timing_repeats": 2,
                       "threads": 1, "async_pause_s": 5.0})
    experiments.asynchronous.run(cfg)
    assert order[-6:] == ["numpy", "sleep 5.0", "torch"] * 2


def _async_table(published_rows: list[dict]) -> pd.DataFrame:
    """The async report's table as if the published rows had been measured."""
    table = pd.DataFrame(published_rows)
    table["speedup"] = report._speedup(table, {"async_pause_s": 0.0}, "torch_nosync_time_s", ["device", "async_pause_s"])
    return table


def test_the_sleep_claim_passes_on_the_notes_figures_and_fails_when_the_sleep_changes_nothing():
    spec = sweep_spec.load("async")
    claim = [c for c in spec.checks if c.metric == "speedup"]
    rows = spec.published["rows"]
    assert [v.verdict for v in checks.evaluate(claim, _async_table(rows))] == ["PASS"]
    flat = [{**r, "torch_nosync_time_s": 0.2859} if r["device"] == "cpu" else r for r in rows]
    assert [v.verdict for v in checks.evaluate(claim, _async_table(flat))] == ["FAIL"]
    swapped = [{**r, "torch_nosync_time_s": {0.2859: 0.2103, 0.2103: 0.2859}.get(r["torch_nosync_time_s"],
                                                                               r["torch_nosync_time_s"])} for r in rows]
    assert [v.verdict for v in checks.evaluate(claim, _async_table(swapped))] == ["FAIL"]
