"""FLOPs counted per training step, the measured peak and its cache, and MFU on every training run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import experiments
from harness import flops, peak
from harness.cells import run_single
from harness.cli import main
from harness.config import make_config
from harness.models import build_model
from harness.pruning import prune_conv_filters
from conftest import TINY_BASE, mlflow_client


def _analytic_training_flops(model: nn.Module, input_shape: tuple[int, int, int]) -> int:
    """2 x multiply-adds of every Conv2d and Linear, forward; backward twice that, except the first
    layer, whose input needs no gradient. Written out from the layer shapes, independently of torch."""
    c, h, w = input_shape
    forward, first = [], None
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # 3x3, padding 1, stride 1: same size out; the book's pools halve it
            forward.append(2 * h * w * m.out_channels * m.in_channels * m.kernel_size[0] * m.kernel_size[1])
            h, w = h // 2, w // 2
        elif isinstance(m, nn.Linear):
            forward.append(2 * m.in_features * m.out_features)
        else:
            continue
        first = forward[0] if first is None else first
    return sum(forward) + 2 * sum(forward) - first


def test_the_books_cnn_step_is_counted_exactly_and_a_pruned_cnn_has_its_own_smaller_count():
    model = build_model("cnn", 10)
    example = torch.rand(4, 3, 32, 32)
    counted = flops.flops_per_sample(model, example)
    assert counted == _analytic_training_flops(model, (3, 32, 32)) == 44_464_128
    assert all(p.grad is None for p in model.parameters())  # counted on a copy: the run's gradients untouched

    pruned = prune_conv_filters(build_model("cnn", 10), 0.5, example, "torch-pruning")
    assert flops.flops_per_sample(pruned, example) == _analytic_training_flops(pruned, (3, 32, 32)) == 15_169_536


def test_a_count_is_made_once_per_architecture_and_shape(monkeypatch):
    model = build_model("tiny_cnn", 10)
    first = flops.flops_per_sample(model, torch.rand(2, 1, 16, 16), "bf16")

    def refuse(*args, **kwargs):
        raise AssertionError("counted again")

    monkeypatch.setattr(flops, "FlopCounterMode", refuse)
    assert flops.flops_per_sample(build_model("tiny_cnn", 10), torch.rand(8, 1, 16, 16), "bf16") == first
    with pytest.raises(AssertionError, match="counted again"):  # another input shape is another count
        flops.flops_per_sample(model, torch.rand(2, 1, 20, 20), "bf16")


def test_the_peak_is_a_real_matmul_rate():
    measured = peak.measure(torch.device("cpu"), "fp32", 1)
    assert measured.flops > 1e8 and measured.size in peak.CPU_SIZES and measured.threads == 1
    assert "TFLOP/s measured" in measured.line() and measured.vendor_flops is None


def test_the_peak_is_cached_per_machine_and_measured_again_when_taken_on_a_busier_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(peak, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(peak, "_known", {})
    rates = iter([5e10, 7e10, 6e10])
    calls = []

    def fake_measure(device, dtype, threads):  # the cache logic, not a figure: the rates are made up
        calls.append(dtype)
        return peak.Peak(next(rates), "cpu", dtype, threads, 1024, "now", 0.0)

    monkeypatch.setattr(peak, "measure", fake_measure)
    monkeypatch.setattr(peak, "_load", lambda: 0.5)
    assert peak.peak_flops("cpu", "fp32").flops == 5e10 and len(calls) == 1
    monkeypatch.setattr(peak, "_known", {})                      # a new process reads the file
    assert peak.peak_flops("cpu", "fp32").flops == 5e10 and len(calls) == 1
    cached = json.loads(peak.cache_path().read_text())
    (key,) = cached
    cached[key]["load"] = 9.0                                     # that figure was taken under load
    peak.cache_path().write_text(json.dumps(cached))
    monkeypatch.setattr(peak, "_known", {})
    assert peak.peak_flops("cpu", "fp32").flops == 7e10 and len(calls) == 2   # measured again, higher kept
    assert peak.peak_flops("cpu", "fp32", remeasure=True).flops == 7e10 and len(calls) == 3  # 6e10 is lower


def test_harness_peak_prints_the_measured_figures_and_refuses_a_missing_gpu(capsys):
    assert main(["peak", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu fp32: ") and "TFLOP/s measured" in out and str(peak.cache_path()) in out
    if not torch.cuda.is_available():
        assert main(["peak", "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "harness: error: --device cuda: this machine has no usable CUDA GPU."


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_harness_peak_on_a_gpu_names_the_vendor_figure_as_such(capsys):
    assert main(["peak", "--device", "cuda", "--dtype", "bf16"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(torch.cuda.get_device_name(0)) and "measured" in line
    if peak.Peak(1.0, torch.cuda.get_device_name(0), "bf16", 0, 1, "", 0.0).vendor_flops:
        assert "vendor datasheet figure" in line and "not measured here" in line


TRAINING = ["pruning", "amp", "data_parallel", "dp_scratch", "recipe"]


@pytest.mark.parametrize("name", TRAINING)
def test_every_training_run_logs_its_flops_and_mfu(name, store):
    experiment = experiments.get(name)
    cfg = make_config({"experiment": name, **experiment.smoke})
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    logged = mlflow_client(store).get_run(result.run_id).data.metrics
    for key in flops.METRICS:
        assert logged[key] == pytest.approx(result.metrics[key])
    assert logged["flops_per_sample"] > 0 and 0 < logged["mfu"] < 1
    assert logged["mfu"] == pytest.approx(logged["achieved_tflops"] / logged["peak_tflops"])
    trained = logged.get("samples_trained", logged["train_samples"] * _epochs_trained(logged, cfg))
    assert logged["achieved_tflops"] * 1e12 == pytest.approx(
        logged["flops_per_sample"] * trained / logged["train_time_s"])


def _epochs_trained(metrics: dict, cfg) -> float:
    return metrics.get("epochs_trained", cfg.epochs)


def test_a_sweep_report_shows_mfu_beside_the_time(sweep_file, store):
    from harness.report import tables
    from harness.sweeps import spec as sweepspec
    from harness.sweeps.engine import run_sweep

    spec = sweepspec.load(str(sweep_file("mfu_report", {"sparsity": [0.0, 0.5]},
                                         base={"pruning_backend": "torch-pruning"})))
    run_sweep(spec, store, scale="smoke", show_progress=False)
    built = tables.build(store, spec, "smoke")
    columns = list(built.table.columns)
    assert columns[:5] == ["sparsity", "train_time_s", "train_time_iqr_s", "speedup", "mfu"]
    assert (built.table["mfu"] > 0).all()
    header = next(line for line in built.markdown.splitlines() if line.startswith("| sparsity"))
    assert header.startswith("| sparsity | train_time_s | train_time_iqr_s | speedup | mfu |")
    assert "- MFU: training FLOPs per second" in built.markdown


def test_tiny_base_trains_with_its_flops_counted(store):
    cfg = make_config({**TINY_BASE, "experiment": "pruning", "epochs": 1})
    result = run_single(cfg, store)
    assert result.metrics["flops_per_sample"] == _analytic_training_flops(build_model("tiny_cnn", 10), (1, 16, 16))
