"""T7 mixed precision, D12.1 compiled vs eager, D12.2 async: numerics and machinery on tiny models.

What is checked is what could silently go wrong: autocast not producing the dtype asked for, the
gradient scaler not being on the fp16 path, a scripted/compiled model computing something else,
the jit deprecation warning reaching the user, and the report computing its ratios per group.
Nothing here asserts a speed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import experiments.amp
import experiments.asynchronous
import experiments.hybridize
from harness.report import tables as report
from harness.specs import sweep_spec
from harness.cli import main
from experiments import make_config
from harness.errors import UserError
from harness.training.models import D2lMLP, TinyCNN
from harness.training.precision import Precision, backend_flags, native_support
from harness.sweeps.sweep_engine import run_sweep
from harness.store.tracking import NOTE_PREFIX
from conftest import mlflow_client

CPU = torch.device("cpu")


# --- config and command line -----------------------------------------------------------------
@pytest.mark.parametrize("key, value, words", [
    ("dtype", "fp64", ["dtype", "'fp32', 'bf16' or 'fp16'"]),
    ("execution", "jit", ["execution", "'eager', 'script' or 'compile'"]),
    ("compile_mode", "fast", ["compile_mode", "max-autotune"]),
    ("forward_calls", "0", ["forward_calls", "positive"]),
    ("grad_scaler", "maybe", ["grad_scaler", "bool"]),
])
def test_bad_speed_method_values_are_one_sentence(key, value, words):
    with pytest.raises(UserError) as err:
        # hybridize has the compile and forward-call fields, amp the autocast ones
        make_config({"experiment": "hybridize" if key in ("execution", "compile_mode", "forward_calls") else "amp",
                     key: value})
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("args, words", [
    (["run", "amp", "--set", "dtype=fp64"], ["dtype", "fp16"]),
    (["run", "async", "--set", "device=cuda"], ["skipped", "no usable CUDA GPU"]),
    (["run", "hybridize", "--set", "device=tpu"], ["device", "cuda:N"]),
])
def test_cli_mistakes_and_missing_gpu_exit_2(args, words, tmp_path, capsys):
    if "cuda" in args[-1] and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main([*args, "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness: error:") and "\n" not in err and all(w in err for w in words), err


# --- mixed precision ---------------------------------------------------------------------------
@pytest.mark.parametrize("name, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_really_runs_the_forward_in_the_requested_dtype(name, dtype):
    precision = Precision.for_device(CPU, name)
    assert precision.forward_dtype(TinyCNN(), torch.rand(2, 1, 16, 16)) == dtype
    # and the loss computed under it comes back in fp32, as autocast promises for cross_entropy
    with precision.autocast():
        loss = nn.functional.cross_entropy(TinyCNN()(torch.rand(2, 1, 16, 16)), torch.tensor([0, 1]))
    assert loss.dtype == torch.float32


def test_fp16_uses_the_cpu_grad_scaler_which_skips_an_inf_step_and_unscales_a_good_one():
    precision = Precision.for_device(CPU, "fp16", grad_scaler=True)
    assert isinstance(precision.scaler, torch.amp.GradScaler) and precision.scaler.is_enabled()
    assert Precision.for_device(CPU, "fp16", grad_scaler=False).scaler is None
    assert Precision.for_device(CPU, "bf16", grad_scaler=True).scaler is None

    layer = nn.Linear(4, 1, bias=False)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.ones(1, 4)
    start = layer.weight.detach().clone()
    scale = precision.scaler.get_scale()

    # A loss whose gradient is inf: the step must be skipped and the scale halved.
    with precision.autocast():
        loss = (layer(x) * float("inf")).sum()
    precision.backward_step(loss, optimizer)
    assert torch.equal(layer.weight, start)
    assert precision.scaler.get_scale() == scale / 2 and precision.skipped_steps() == 1

    # A finite loss: the step uses the unscaled gradient (d loss / d w = x = 1 for every weight).
    optimizer.zero_grad()
    with precision.autocast():
        loss = layer(x).float().sum()
    precision.backward_step(loss, optimizer)
    assert torch.allclose(layer.weight, start - 0.1, atol=1e-3)
    assert precision.skipped_steps() == 1


def test_native_support_reads_the_cpu_flags():
    assert native_support(CPU, "fp32", flags=set())
    assert not native_support(CPU, "bf16", flags={"avx2", "fma"})
    assert native_support(CPU, "bf16", flags={"avx2", "amx_bf16"})
    assert not native_support(CPU, "fp16", flags={"avx512_bf16"})
    assert native_support(CPU, "fp16", flags={"avx512_fp16"})


def test_backend_flags_are_set_for_the_cell_and_restored_after():
    before = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32)
    cfg = make_config({"experiment": "amp", "cudnn_benchmark": True, "allow_tf32": True})
    with backend_flags(cfg) as flags:
        assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32
        assert flags["flag_benchmark"] == 1.0 and flags["flag_allow_tf32"] == 1.0
        assert flags["flag_allow_fp16_reduced_precision_reduction"] == 0.0
    assert (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32) == before


AMP_SWEEP = """
name = "{name}"
title = "amp test"
experiment = "amp"
[base]
model = "tiny_cnn"
dataset = "synthetic"
train_limit = 128
test_limit = 64
warmup_epochs = 0
epochs = 1
batch_size = 32
lr = 0.01
threads = 1
device = "cpu"
[grid]
dtype = ["fp32", "bf16", "fp16"]
[report]
x = "dtype"
baseline = {{ dtype = "fp32" }}
metrics = ["train_time_s", "test_accuracy", "dtype_native", "scaler_skipped_steps"]
notes = [{{ when = {{ dtype = "bf16", dtype_native = 0 }}, text = "emulated" }}]
[published]
rows = [{{ dtype = "fp32", train_time_s = 811 }}, {{ dtype = "fp16", train_time_s = 486 }}]
"""


def test_amp_sweep_logs_dtype_scaler_and_the_emulated_note(store, tmp_path, monkeypatch):
    # Pretend the CPU has no bf16/fp16 instructions, so the report must say "emulated".
    monkeypatch.setattr("harness.training.precision.cpu_flags", lambda: {"avx2"})
    path = tmp_path / "amp_t.toml"
    path.write_text(AMP_SWEEP.format(name="amp_t"))
    spec = sweep_spec.load(str(path))
    result = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok", "ok"], [r.reason for r in result.results]
    by_dtype = {r.cell.config.dtype: r for r in result.results}
    assert by_dtype["fp16"].metrics["grad_scaler_used"] == 1.0
    assert by_dtype["bf16"].metrics["grad_scaler_used"] == 0.0
    assert by_dtype["fp32"].metrics["dtype_native"] == 1.0 and by_dtype["bf16"].metrics["dtype_native"] == 0.0
    for dtype, r in by_dtype.items():
        tags = mlflow_client(store).get_run(r.run_id).data.tags
        assert tags[NOTE_PREFIX + "forward_dtype"] == {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
        assert "forward_dtype" not in r.metrics

    t = report.build(store, spec).table.set_index("dtype")
    assert list(t.index) == ["fp32", "bf16", "fp16"]  # the grid's order, not the alphabet's
    assert t.loc["fp32", "speedup"] == pytest.approx(1.0)
    assert t.loc["fp16", "book_speedup"] == pytest.approx(811 / 486)
    # Only the sweep's own notes: a "timed while other work held ..." note depends on this machine's load.
    own = {dtype: [n for n in t.loc[dtype, "note"].split("; ") if n and not n.startswith("timed while")]
           for dtype in ("bf16", "fp16")}
    assert own == {"bf16": ["emulated"], "fp16": []}


def test_amp_fails_the_cell_when_autocast_did_not_produce_the_dtype(monkeypatch):
    monkeypatch.setattr(Precision, "forward_dtype", lambda self, model, x: torch.float32)
    cfg = make_config({"experiment": "amp", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 32,
                       "test_limit": 32, "epochs": 1, "warmup_epochs": 0, "dtype": "bf16", "threads": 1})
    with pytest.raises(RuntimeError, match="asked for bf16 but the forward ran in torch.float32"):
        experiments.amp.run(cfg)


# --- compiled vs eager -------------------------------------------------------------------------
def test_scripted_model_reloads_without_its_class_and_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = D2lMLP().eval()
    x = torch.randn(3, 512)
    with experiments.hybridize.captured_warnings() as caught:
        loaded = experiments.hybridize.make_variant(model, "script", tmp_path)
    assert any("deprecated" in text for text in caught)  # captured, not printed
    assert not isinstance(loaded, D2lMLP)
    torch.testing.assert_close(loaded(x), model(x))
    # A fresh interpreter that never imports the project loads the file and gets the same output.
    torch.save(x, tmp_path / "x.pt")
    torch.save(model(x).detach(), tmp_path / "y.pt")
    code = textwrap.dedent("""
        import sys, torch
        assert "harness" not in sys.modules
        m = torch.jit.load("scripted.pt")
        torch.testing.assert_close(m(torch.load("x.pt")), torch.load("y.pt"))
        print("same output")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "same output" in done.stdout, done.stderr


def test_compiled_model_matches_eager_without_codegen():
    # aot_eager runs dynamo tracing and AOTAutograd but no C++ code generation: seconds, not minutes.
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.rand(4, 1, 16, 16)
    compiled = experiments.hybridize.make_variant(model, "compile", None, compile_backend="aot_eager")
    torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.slow
def test_inductor_compiled_model_matches_eager():
    torch.manual_seed(0)
    model = D2lMLP().eval()
    x = torch.randn(2, 512)
    compiled = experiments.hybridize.make_variant(model, "compile", None, compile_backend="inductor")
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


HYB_SWEEP = """
name = "hyb_t"
title = "hybridize test"
experiment = "hybridize"
[base]
batch_size = 1
forward_calls = 20
warmup_calls = 2
timing_repeats = 3
threads = 1
[grid]
model = ["mlp_d2l", "tiny_cnn"]
execution = ["eager", "script"]
[scales.smoke]
model = ["mlp_d2l"]
[report]
x = "execution"
time = "per_call_us"
baseline = { execution = "eager" }
metrics = ["per_call_us", "max_abs_diff_vs_eager", "warnings_captured"]
"""


def test_hybridize_sweep_keeps_the_jit_warning_off_the_screen_and_on_the_run(store, tmp_path, capfd):
    path = tmp_path / "hyb_t.toml"
    path.write_text(HYB_SWEEP)
    spec = sweep_spec.load(str(path))
    assert len(sweep_spec.expand(spec, "smoke")) == 2 and len(sweep_spec.expand(spec, "full")) == 4
    result = run_sweep(spec, store, scale="smoke", show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok"], [r.reason for r in result.results]
    assert "deprecated" not in capfd.readouterr().err
    script = next(r for r in result.results if r.cell.config.execution == "script")
    assert script.metrics["max_abs_diff_vs_eager"] <= 1e-5 and script.metrics["warnings_captured"] >= 1
    assert "deprecated" in mlflow_client(store).get_run(script.run_id).data.tags[NOTE_PREFIX + "captured_warnings"]
    t = report.build(store, spec).table.set_index("execution")
    assert t.loc["eager", "speedup"] == pytest.approx(1.0)
    assert t.loc["script", "speedup"] == pytest.approx(t.loc["eager", "per_call_us"] / t.loc["script", "per_call_us"])


def test_speedup_baseline_is_taken_per_model():
    import pandas as pd

    frame = pd.DataFrame({"model": ["a", "a", "b", "b"], "execution": ["eager", "script"] * 2,
                          "t": [10.0, 5.0, 100.0, 200.0]})
    got = report._speedup(frame, {"execution": "eager"}, "t", ["model", "execution"])
    assert list(got) == [1.0, 2.0, 1.0, 0.5]


# --- asynchronous execution --------------------------------------------------------------------
def test_async_on_cpu_sees_no_queue():
    cfg = make_config({"experiment": "async", "matrix_size": 200, "matmul_iterations": 3,
                       "timing_repeats": 3, "threads": 1})
    m = experiments.asynchronous.run(cfg)
    # How close the share comes to 1 on a CPU is a timing: the async sweep's check (0.9 to 1.1 on
    # the cpu rows) judges it in `make report-async`. Here, what holds however loaded the machine:
    # each repeat reads the clock without a synchronize first, so neither figure can exceed the other.
    assert 0 < m["torch_nosync_time_s"] <= m["torch_sync_time_s"]
    assert 0 < m["nosync_share"] <= 1
    assert m["numpy_over_torch"] == pytest.approx(m["numpy_time_s"] / m["torch_sync_time_s"])
    assert m["matrix_size_used"] == 200  # a CPU is never sized up: nothing is queued to outgrow
    assert m["numpy_time_s"] > 0 and m["numpy_time_iqr_s"] >= 0
