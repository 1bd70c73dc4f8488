"""FLOPs counted per training step, the measured peak and its cache, and MFU on every training run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import experiments
from harness.machine import machine_load
from harness.training import flops, peak
from harness import folders
from harness.cells import run_single
from harness.cli import main
from experiments import make_config
from harness.training.models import build_model
from harness.training.pruning import prune_conv_filters
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


def test_a_depthwise_conv_is_counted_once_per_channel_in_all_three_terms():
    """32-channel depthwise 3x3 on 8x32x16x16 (padding 1, so 16x16 out): each term (forward, input
    gradient, weight gradient) is 2 x 8 x 16 x 16 x 32 x 9 = 1,179,648; torch's own counter gives
    the weight gradient 32 times over (40.1 MFLOP in all)."""
    from torch.utils.flop_counter import FlopCounterMode

    conv = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
    x = torch.rand(8, 32, 16, 16, requires_grad=True)
    by_hand = 2 * 8 * 16 * 16 * 32 * 9
    with FlopCounterMode(display=False, custom_mapping=flops.CONV_FORMULAS) as ours:
        conv(x).sum().backward()
    assert ours.get_total_flops() == 3 * by_hand == 3_538_944
    with FlopCounterMode(display=False) as torchs:
        conv(x).sum().backward()
    assert torchs.get_total_flops() == 2 * by_hand + 32 * by_hand   # the bug our formula replaces


def _training_flops_from_shapes(model: nn.Module, example: torch.Tensor) -> float:
    """Per sample, from each Conv2d's and Linear's attributes and the output shapes a forward hook
    sees (never a FLOP counter): a conv term is 2 x output positions x C_out x C_in / groups x
    kernel, a linear term 2 x in x out; training is three terms each (forward, input gradient,
    weight gradient), less the first layer's input gradient, which nothing needs."""
    terms, hooks = [], []

    def conv_hook(m, args, out):
        positions = out.shape[2] * out.shape[3]
        terms.append(2 * positions * m.out_channels * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1])

    def linear_hook(m, args, out):
        terms.append(2 * m.in_features * m.out_features)

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(linear_hook))
    with torch.no_grad():
        model.eval()(example[:1])
    for h in hooks:
        h.remove()
    return 3 * sum(terms) - terms[0]


def test_efficientnet_b0_at_32x32_is_counted_as_its_layer_shapes_say():
    model = build_model("efficientnet_b0", 10)
    example = torch.rand(2, 3, 32, 32)
    by_hand = _training_flops_from_shapes(model, example)
    assert flops.flops_per_sample(model, example) == pytest.approx(by_hand, rel=1e-9)
    assert 55e6 < by_hand < 61e6   # 58 MFLOP a sample; torch's own counter said 668
    head = 3 * 2 * model.classifier[-1].in_features * model.classifier[-1].out_features
    assert head / by_hand == pytest.approx(0.13, abs=0.01)   # the 1000-class head's share (harness/training/models.py)


def test_a_count_is_made_once_per_architecture_and_shape(monkeypatch):
    model = build_model("tiny_cnn", 10)
    first = flops.flops_per_sample(model, torch.rand(2, 1, 16, 16), "bf16")

    def refuse(*args, **kwargs):
        raise AssertionError("counted again")

    monkeypatch.setattr(flops, "FlopCounterMode", refuse)
    assert flops.flops_per_sample(build_model("tiny_cnn", 10), torch.rand(8, 1, 16, 16), "bf16") == first
    with pytest.raises(AssertionError, match="counted again"):  # another input shape is another count
        flops.flops_per_sample(model, torch.rand(2, 1, 20, 20), "bf16")


def _tiny_peak_sizes(monkeypatch):
    """Sizes small enough that a measurement takes a fraction of a second (the logic, not the figure)."""
    monkeypatch.setattr(peak, "CPU_SIZES", {"matmul": (64, 128), "conv": (8, 16)})
    monkeypatch.setattr(peak, "MIN_SECONDS", 0.01)


def test_the_peak_is_the_median_rate_of_the_best_kernel_and_names_it(monkeypatch):
    _tiny_peak_sizes(monkeypatch)
    measured = peak.measure(torch.device("cpu"), "fp32", 1)
    assert measured.flops > 1e8 and measured.threads == 1 and measured.key == "cpu:fp32:1t"
    assert measured.kernel in ("matmul", "conv2d", "conv2d channels_last") and measured.size
    assert measured.kernel in measured.line() and measured.size in measured.line() and measured.vendor_flops is None


def test_the_peak_takes_the_median_of_repeats_not_the_fastest_call(monkeypatch):
    clock = iter([0.001, 1.0, 2.0, 3.0, 4.0, 5.0])   # the timed warm-up, then five repeats

    class FakeTimed:
        def __init__(self, *devices):
            pass

        def __enter__(self):
            self.seconds = next(clock)
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(peak, "timed", FakeTimed)
    monkeypatch.setattr(peak, "MIN_SECONDS", 10.0)
    monkeypatch.setattr(peak, "MIN_REPEATS", 5)
    monkeypatch.setattr(peak, "MAX_REPEATS", {"cpu": 5})
    rate, slow = peak._steady_rate(torch.device("cpu"), lambda: None, 6.0)
    assert not slow and rate == 6.0 / 3.0   # the median call took 3 s; the fastest (1 s) would say 6


def test_a_dtype_without_native_arithmetic_has_no_peak_and_no_mfu(monkeypatch):
    monkeypatch.setattr(flops.peak, "native_support", lambda device, dtype: dtype != "fp16")
    with pytest.raises(ValueError, match="no native arithmetic"):
        peak.peak_flops("cpu", "fp16")
    metrics = flops.flop_metrics(1e6, samples=100, train_time_s=1.0, device="cpu", dtype="fp16")
    assert "mfu" not in metrics and "peak_tflops" not in metrics
    assert metrics["mfu_na"].startswith("MFU N/A: fp16 has no native arithmetic on this CPU")
    assert metrics["achieved_tflops"] == pytest.approx(1e8 / 1e12)


def _fake_peaks(monkeypatch, tmp_path, rates, contended=()):
    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(peak, "_known", {})
    rates, calls = iter(rates), []

    def fake_measure(device, dtype, threads):  # the cache logic, not a figure: the rates are made up
        calls.append((dtype, threads))
        other = 1.5 if len(calls) in contended else 0.0
        return peak.Peak(next(rates), "cpu", dtype, threads, "matmul", "1024x1024 @ 1024x1024", "now", 0.0,
                         other, peak.peak_key("cpu", dtype, threads))

    monkeypatch.setattr(peak, "measure", fake_measure)
    return calls


def test_the_peak_is_cached_per_thread_count_and_a_loaded_figure_is_flagged_and_measured_again(monkeypatch, tmp_path):
    calls = _fake_peaks(monkeypatch, tmp_path, [5e10, 2e10, 7e10, 6e10], contended={1})
    other_work = [1.5]   # cores other work holds at each lookup's probe
    monkeypatch.setattr(peak, "_quiet_now", lambda old: other_work[0] < machine_load.CONTENDED_CORES)
    first = peak.peak_flops("cpu", "fp32", threads=2)
    assert first.flops == 5e10 and first.contended and "measured while other work held 1.5 cores" in first.line()
    assert peak.peak_flops("cpu", "fp32", threads=1).flops == 2e10 and len(calls) == 2   # another key
    monkeypatch.setattr(peak, "_known", {})                      # a new process reads the file
    assert peak.peak_flops("cpu", "fp32", threads=2).flops == 5e10 and len(calls) == 2   # still busy: kept
    other_work[0] = 0.0
    monkeypatch.setattr(peak, "_known", {})
    again = peak.peak_flops("cpu", "fp32", threads=2)             # quiet now: measured again, and it stands
    assert again.flops == 7e10 and not again.contended and len(calls) == 3
    assert peak.peak_flops("cpu", "fp32", threads=2, remeasure=True).flops == 6e10 and len(calls) == 4


def test_a_loaded_figure_is_measured_again_when_the_probe_finds_the_machine_quiet_whatever_the_load_average(monkeypatch):
    """The figure of 2026-12-04 (load average 0.81, other work 1.0 core) was never measured again
    inside sweeps whose own cells kept the load average near 2: the probe of other work decides."""
    old = peak.Peak(1.7e11, "cpu", "fp32", 2, "matmul", "2048", "then", 0.81, 1.0, "cpu:fp32:2t")
    monkeypatch.setattr(peak, "QUIET_PROBE_S", 0.0)
    monkeypatch.setattr(peak, "_load", lambda: 2.0)
    monkeypatch.setattr(peak.LoadWatch, "finish", lambda self: {machine_load.OTHER_CORES: 0.01})
    assert peak._quiet_now(old)
    monkeypatch.setattr(peak.LoadWatch, "finish", lambda self: {machine_load.OTHER_CORES: 1.0})
    assert not peak._quiet_now(old)
    monkeypatch.setattr(peak.LoadWatch, "finish", lambda self: {})   # no probe: the load average decides
    assert not peak._quiet_now(old)


def test_a_quiet_figure_is_never_replaced_by_one_taken_under_load_not_even_on_remeasure(monkeypatch, tmp_path):
    calls = _fake_peaks(monkeypatch, tmp_path, [4.5e11, 1.7e11, 5e11], contended={2})
    assert peak.peak_flops("cpu", "fp32", threads=2).flops == 4.5e11
    kept = peak.peak_flops("cpu", "fp32", threads=2, remeasure=True)      # measured under load: 1.7e11
    assert kept.flops == 4.5e11 and not kept.contended and len(calls) == 2
    assert peak.peak_flops("cpu", "fp32", threads=2, remeasure=True).flops == 5e11   # quiet again: it stands


def test_an_mfu_above_one_is_logged_as_an_error_of_the_peak_which_is_measured_again(monkeypatch, tmp_path):
    calls = _fake_peaks(monkeypatch, tmp_path, [1e9, 1e12])
    metrics = flops.flop_metrics(1e9, samples=10, train_time_s=1.0, device="cpu", dtype="fp32", threads=1)
    assert "mfu" not in metrics and metrics["mfu_invalid"] == 1.0
    assert metrics["mfu_invalid_reason"].startswith("peak below achieved: 0.01 TFLOP/s achieved against 1 x 0.001")
    assert "cpu:fp32:1t" not in json.loads(peak.cache_path().read_text())   # dropped from the cache
    metrics = flops.flop_metrics(1e9, samples=10, train_time_s=1.0, device="cpu", dtype="fp32", threads=1)
    assert len(calls) == 2 and metrics["mfu"] == pytest.approx(0.01) and "mfu_invalid" not in metrics


def test_ranks_are_divided_by_the_peak_of_their_own_cores(monkeypatch, tmp_path):
    _fake_peaks(monkeypatch, tmp_path, [1e11, 3e11])
    two_ranks = flops.flop_metrics(1e9, samples=100, train_time_s=1.0, device="cpu", threads=1,
                                   devices=flops.peak_devices("cpu", 2))
    assert two_ranks["peak_key"] == "cpu:fp32:1t" and two_ranks["peak_devices"] == 2
    assert two_ranks["mfu"] == pytest.approx(1e11 / (2 * 1e11))
    one_rank = flops.flop_metrics(1e9, samples=100, train_time_s=1.0, device="cpu", threads=2)
    assert one_rank["peak_key"] == "cpu:fp32:2t" and one_rank["mfu"] == pytest.approx(1e11 / 3e11)


def test_harness_peak_prints_the_kernel_behind_each_figure_and_refuses_a_missing_gpu(monkeypatch, capsys):
    _tiny_peak_sizes(monkeypatch)
    monkeypatch.setattr(peak, "_known", {})
    assert main(["peak", "--dtype", "fp32", "--threads", "1", "--remeasure"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu fp32 1 thread(s): ") and "TFLOP/s measured" in out and str(peak.cache_path()) in out
    assert any(kernel in out for kernel in ("matmul ", "conv2d ")) and "median of repeats" in out
    assert main(["peak", "--threads", "0"]) == 2
    assert "--threads must be between 1 and" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["peak", "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "harness: error: --device cuda: this machine has no usable CUDA GPU."


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_harness_peak_on_a_gpu_names_the_vendor_figure_as_such(capsys):
    assert main(["peak", "--device", "cuda", "--dtype", "bf16"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(torch.cuda.get_device_name(0)) and "measured" in line
    assert "matmul" in line or "conv2d" in line
    if peak.Peak(1.0, torch.cuda.get_device_name(0), "bf16", 0, "matmul", "1", "", 0.0).vendor_flops:
        assert "vendor datasheet figure" in line and "not measured here" in line


TRAINING = ["pruning", "amp", "data_parallel", "dp_scratch", "recipe"]


@pytest.mark.parametrize("name", TRAINING)
def test_every_training_run_logs_its_flops_and_mfu(name, store):
    experiment = experiments.get(name)
    values = {"experiment": name, **experiment.smoke}
    if peak.unsupported(values.get("device", "cpu"), values.get("dtype", "fp32")):
        # a smoke run in bf16 where bf16 is emulated has no peak, so no MFU to check (its mfu_na:
        # tests/test_experiments.py): the same run in fp32 has one
        values["dtype"] = "fp32"
    cfg = make_config(values)
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    logged = mlflow_client(store).get_run(result.run_id).data.metrics
    for key in set(flops.METRICS) - {"mfu_invalid"}:   # logged only when the peak was wrong
        assert logged[key] == pytest.approx(result.metrics[key])
    assert logged["flops_per_sample"] > 0 and 0 < logged["mfu"] <= 1
    assert logged["mfu"] == pytest.approx(logged["achieved_tflops"] / logged["peak_tflops"])
    # what it is computed from is on the record: FLOPs x samples / time over the named peak x devices
    # (the figure this process used: another test's process may have measured the key again since)
    key = mlflow_client(store).get_run(result.run_id).data.tags["harness.note.peak_key"]
    named = peak._known[key]
    assert logged["mfu"] == pytest.approx(logged["flops_per_sample"] * logged["mfu_samples"] / logged["mfu_time_s"]
                                          / (named.flops * logged["peak_devices"]))
    trained = logged.get("samples_trained", logged["train_samples"] * _epochs_trained(logged, cfg))
    assert logged["achieved_tflops"] * 1e12 == pytest.approx(
        logged["flops_per_sample"] * trained / logged["train_time_s"])


def _epochs_trained(metrics: dict, cfg) -> float:
    return metrics.get("epochs_trained", cfg.epochs)


def test_a_sweep_report_shows_mfu_beside_the_time(sweep_file, store):
    from harness.report import tables
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    spec = sweep_spec.load(str(sweep_file("mfu_report", {"sparsity": [0.0, 0.5]},
                                         base={"pruning_backend": "torch-pruning"})))
    run_sweep(spec, store, scale="smoke", show_progress=False)
    built = tables.build(store, spec, "smoke")
    columns = list(built.table.columns)
    assert columns[:5] == ["sparsity", "train_time_s", "train_time_iqr_s", "speedup", "mfu"]
    assert (built.table["mfu"] > 0).all()
    header = next(line for line in built.markdown.splitlines() if line.startswith("| sparsity"))
    assert header.startswith("| sparsity | time (s) | speed-up | MFU |")
    assert "- MFU: training FLOPs per second" in built.markdown
    for column in ("flops_per_sample", "mfu_samples", "mfu_time_s", "peak_devices", "peak_tflops", "peak_key"):
        assert built.table[column].notna().all(), column   # the CSV keeps what the MFU is computed from


def test_tiny_base_trains_with_its_flops_counted(store):
    cfg = make_config({**TINY_BASE, "experiment": "pruning", "epochs": 1})
    result = run_single(cfg, store)
    assert result.metrics["flops_per_sample"] == _analytic_training_flops(build_model("tiny_cnn", 10), (1, 16, 16))


def test_a_committed_mfu_is_recomputed_from_its_csv_row_and_the_peak_the_report_prints(
        sweep_file, store, tmp_path, monkeypatch):
    import re

    import pandas as pd

    from harness.report.reproduction import write_reproduction
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    path = sweep_file("mfu_recompute", {"sparsity": [0.0, 0.5]}, base={"pruning_backend": "torch-pruning"})
    monkeypatch.setattr(sweep_spec, "SWEEPS_DIR", path.parent)
    run_sweep(sweep_spec.load("mfu_recompute"), store, scale="smoke", show_progress=False)
    written, _ = write_reproduction(store, tmp_path / "out")
    page = written.read_text()
    printed = {key: float(value) for key, value in
               re.findall(r"^  - `([^`]+)`: ([0-9.e+-]+) TFLOP/s per device; ", page, re.M)}
    rows = pd.read_csv(tmp_path / "out" / "mfu_recompute.csv").to_dict("records")
    assert len(rows) == 2 and printed
    for row in rows:   # one repeat a row: the row's figures are its cell's
        recomputed = (row["flops_per_sample"] * row["mfu_samples"] / row["mfu_time_s"]
                      / (printed[row["peak_key"]] * 1e12 * row["peak_devices"]))
        assert row["mfu"] == pytest.approx(recomputed, rel=1e-5)
    assert page.index("## At a glance") < page.index("## Caveats") < page.index("## Machine") \
        < page.index("## Conventions") < page.index("## Tables")
    assert page.count("- **Clock**") == 1 and "- Clock:" not in page   # stated once, not per table
