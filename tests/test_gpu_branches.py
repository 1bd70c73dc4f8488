"""The GPU branches of issue 14, checked on a CPU wherever a CPU can check them: which path a cell
takes, what it passes to torch, the skip reasons, the worker GPU slices, the T10.2 grid and its
speed-ups, the per-rank seeds. What only a GPU can show is in test_gpu.py (marked `gpu`)."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager

import pytest
import torch
from torch import nn

import experiments
import experiments.asynchronous as asynchronous
import experiments.data_parallel as data_parallel
import experiments.dp_scratch as dp_scratch
import experiments.hybridize as hybridize
from harness.machine import hardware
from harness.training import precision, timing
from harness.report import tables as report
from harness.specs import sweep_spec
from experiments import make_config
from harness.training.data import DeviceBatches, Split, synthetic
from harness.distributed import ddp_train, placement
from harness.distributed.launch import torchrun_command
from harness.distributed.rank import RankContext
from harness.errors import CellSkipped
from harness.folders import REPO_ROOT
from harness.store import Outcome
from harness.store.tracking import CELL_ID, SCALE, SWEEP

OK = Outcome.OK

TINY = {"experiment": "data_parallel", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 96,
        "test_limit": 32, "epochs": 1, "warmup_epochs": 0, "batch_size": 32, "lr": 0.01, "threads": 1}
CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


def _cfg(**changes):
    return make_config({**TINY, **changes})


@pytest.fixture
def pretend_gpus(monkeypatch):
    """This process sees `n` CUDA GPUs as far as counting goes (nothing is run on them)."""
    def pretend(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return pretend


# --- 1. batches gathered into reusable (pinned on CUDA) buffers ---------------------------------
def test_staged_batches_equal_plain_indexing_including_the_short_last_one():
    split = synthetic((1, 4, 4), 10, 2, seed=0).train
    to_device = DeviceBatches(torch.device("cpu"), staged=True)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(1))
    seen = []
    for start in range(0, 10, 4):  # 4, 4, then 2
        idx = order[start:start + 4]
        x, y = to_device(split, idx)
        assert torch.equal(x, split.x[idx]) and torch.equal(y, split.y[idx])
        seen.append(x.data_ptr())
    assert seen[0] == seen[2] != seen[1]  # two buffers take turns; the short batch reuses the first


def test_on_cpu_a_batch_is_plain_indexing_and_on_cuda_it_is_staged():
    assert not DeviceBatches(torch.device("cpu")).staged
    assert DeviceBatches(CUDA0).staged  # nothing is allocated until a batch is asked for


def test_the_clock_text_says_how_batches_reach_the_device():
    from harness.training import train

    assert "pinned" in train.CLOCK and "pinned" in ddp_train.CLOCK
    assert "pageable" in experiments.get("dp_scratch").clock and "synchronous" in experiments.get("dp_scratch").clock


# --- 2. each sweep worker its own GPUs ----------------------------------------------------------
@pytest.mark.parametrize("visible, workers, slices", [
    (["0", "1", "2", "3"], 2, [["0", "1"], ["2", "3"]]),
    (["0", "1", "2"], 2, [["0"], ["1"]]),                 # equal slices; GPU 2 idles
    (["4", "6"], 3, [["4"], ["6"], []]),                 # more workers than GPUs: the last sees none
    (["GPU-aa", "GPU-bb"], 2, [["GPU-aa"], ["GPU-bb"]]),  # UUIDs kept as given
])
def test_workers_get_disjoint_gpu_slices(visible, workers, slices):
    assert placement.worker_gpu_slices(workers, visible) == slices
    envs = [placement.worker_gpu_env(i, workers, visible) for i in range(workers)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == [",".join(s) for s in slices]
    assert f"worker 1 of {workers}" in envs[0][hardware.SLICE_ENV]


def test_no_gpus_or_one_worker_changes_nothing(monkeypatch):
    assert placement.worker_gpu_env(0, 2, []) == {}
    assert placement.worker_gpu_env(0, 1, ["0", "1"]) == {}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert placement.worker_gpu_env(1, 2) == {}


def test_the_slices_come_from_what_this_process_sees(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7,9")
    assert placement.worker_gpu_env(1, 2)["CUDA_VISIBLE_DEVICES"] == "7,9"
    with pytest.raises(ValueError, match="index 2"):
        placement.worker_gpu_env(2, 2)


def test_too_many_workers_for_the_gpus_is_named():
    assert placement.gpu_workers_problem(2, ["0", "1"]) is None
    problem = placement.gpu_workers_problem(3, ["0", "1"])
    assert "needs 3 GPUs" in problem and "has 2" in problem and "--workers 2" in problem


def test_a_cell_bigger_than_its_workers_slice_is_a_skip_that_names_the_slice(pretend_gpus, monkeypatch):
    env = placement.worker_gpu_env(1, 2, ["0", "1"])
    monkeypatch.setenv(hardware.SLICE_ENV, env[hardware.SLICE_ENV])
    pretend_gpus(1)  # what CUDA_VISIBLE_DEVICES=1 makes torch count
    with pytest.raises(CellSkipped) as skip:
        placement.check_can_run(_cfg(world_size=2, device="cuda", backend="nccl"))
    assert "need 2 GPUs" in str(skip.value) and "worker 2 of 2 sees GPU(s) 1 of 0,1" in str(skip.value)
    pretend_gpus(0)
    with pytest.raises(CellSkipped, match="no usable CUDA GPU .*worker 2 of 2"):
        placement.check_can_run(_cfg(world_size=1, device="cuda"))


# --- 3. DDP on GPUs goes over NCCL --------------------------------------------------------------
def test_gloo_between_gpus_is_a_skip_that_says_use_nccl(pretend_gpus):
    pretend_gpus(2)
    with pytest.raises(CellSkipped, match="backend=nccl"):
        placement.check_can_run(_cfg(world_size=2, device="cuda", backend="gloo"))
    placement.check_can_run(_cfg(world_size=1, device="cuda", backend="gloo"))  # one rank: no allreduce


@pytest.mark.parametrize("sweep, nccl", [("dp-scratch", True), ("resnet", True), ("gpus", True), ("cpu-ddp", True),
                                         ("amp", False)])
def test_make_device_cuda_switches_the_ddp_sweeps_to_nccl(sweep, nccl):
    """make passes the device; the harness sets the backend the sweep's experiment declares for it."""
    import argparse

    from harness.cli.commands import _overrides
    from harness.specs import sweep_spec

    dry = subprocess.run(["make", "-n", f"sweep-{sweep}", "DEVICE=cuda", "SCALE=smoke"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "--device cuda" in dry and "backend" not in dry
    sets = _overrides(argparse.Namespace(device="cuda", sets=[]), sweep_spec.load(sweep).experiment)
    assert (sets.get("backend") == "nccl") == nccl


# --- 4. a clock over several devices synchronizes each --------------------------------------------
def test_timed_synchronizes_every_device_it_is_given(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    with timing.timed(CUDA0, CUDA1, CUDA1):
        assert synced == [CUDA0, CUDA1]
    assert synced == [CUDA0, CUDA1, CUDA0, CUDA1]


def test_the_scratch_clock_covers_every_copy_device(monkeypatch):
    clocks = []

    @contextmanager
    def recording(*devices):
        clocks.append(devices)
        with timing.timed(*devices) as interval:
            yield interval

    monkeypatch.setattr(dp_scratch, "timed", recording)
    cfg = make_config({"experiment": "dp_scratch", "model": "lenet_d2l", "dataset": "synthetic",
                       "train_limit": 64, "test_limit": 32, "epochs": 1, "warmup_epochs": 0,
                       "batch_size": 32, "lr": 0.1, "world_size": 2, "threads": 1})
    devices = [torch.device("cpu", 0), torch.device("cpu", 1)]  # two named devices stand for two GPUs
    dp_scratch.train_copies(cfg, dp_scratch._data(cfg), devices)
    assert clocks == [tuple(devices)]


# --- 5. no CUDA context in the sweep process --------------------------------------------------------
def test_one_gpu_rank_runs_under_torchrun_not_in_the_sweep_process(pretend_gpus, monkeypatch):
    pretend_gpus(1)
    launched = []
    monkeypatch.setattr(data_parallel, "launch", lambda cfg, target: launched.append(cfg.world_size) or
                        {"epoch_times": [1.0], "epoch_losses": [0.5], "train_time_s": 1.0, "train_samples": 64,
                         "flops_per_sample": 1e6})
    monkeypatch.setattr(ddp_train, "train", lambda *a: pytest.fail("trained in the sweep process"))
    monkeypatch.setattr(data_parallel, "flop_metrics", lambda *a, **k: {})  # the GPU peak needs a real GPU
    assert data_parallel.run(_cfg(world_size=1, device="cuda", backend="nccl"))["train_time_s"] == 1.0
    assert launched == [1]


def test_scratch_copies_on_gpus_run_in_one_launched_process(pretend_gpus, monkeypatch):
    pretend_gpus(2)
    calls = []
    monkeypatch.setattr(dp_scratch, "launch", lambda cfg, target, processes=None: calls.append((target, processes))
                        or {"epoch_times": [0.1], "train_time_s": 0.1, "params_match": 1.0, "flops_per_sample": 1e6})
    cfg = make_config({"experiment": "dp_scratch", "model": "lenet_d2l", "dataset": "synthetic",
                       "world_size": 2, "device": "cuda", "dp_impl": "scratch", "batch_size": 32})
    assert dp_scratch.run(cfg) == {"train_time_s": 0.1, "params_match": 1.0, "flops_per_sample": 1e6}
    assert calls == [(dp_scratch.SCRATCH_TARGET, 1)]
    pretend_gpus(1)
    with pytest.raises(CellSkipped, match="need 2 GPUs"):  # decided here, before anything is launched
        dp_scratch.run(cfg)


def test_a_single_process_launch_asks_torchrun_for_one_process(tmp_path):
    command = torchrun_command(_cfg(world_size=2), tmp_path / "c.json", tmp_path, "m:f", processes=1)
    assert "--nproc-per-node=1" in command
    assert placement.threads_per_rank(_cfg(world_size=2, threads=0), cores=8, ranks=1) == 8


# --- 6. T10.2: one 1-GPU cell, and every lr_scaling series has its speed-up --------------------------
@pytest.mark.parametrize("scale", ["smoke", "quick", "full"])
def test_the_gpu_sweep_runs_one_gpu_once(scale):
    cells = sweep_spec.expand(sweep_spec.load("gpus"), scale)
    ids = [c.cell_id for c in cells]
    assert len(ids) == len(set(ids))
    first_round = [c for c in cells if c.config.repeat == 0]   # every round repeats the grid
    assert [c.config.lr_scaling for c in first_round if c.config.world_size == 1] == ["none"]
    two = {c.config.lr_scaling for c in first_round if c.config.world_size == 2}
    assert two == {"none", "linear", "linear_warmup"}


def test_each_lr_scaling_series_is_sped_up_over_the_one_gpu_cell(store):
    spec = sweep_spec.load("gpus").model_copy(update={"name": "gpus-series-baseline"})
    experiment = store.experiment_id(spec.name)
    tags = {SWEEP: spec.name, SCALE: "smoke"}
    parent = store.start_run(experiment, "parent", tags)
    times = {(1, "none"): 8.0, (2, "none"): 4.0, (2, "linear"): 5.0, (2, "linear_warmup"): 2.0}
    for (world_size, rule), seconds in times.items():
        run = store.start_run(experiment, f"{world_size} {rule}", {**tags, CELL_ID: f"{world_size}{rule}"}, parent)
        store.log_params(run, {"world_size": world_size, "lr_scaling": rule})
        store.end_run(run, OK, metrics={"train_time_s": seconds, "test_accuracy": 0.5, "final_lr": 0.1,
                                        "threads_used": 1})
    store.end_run(parent, OK)
    table = report.build(store, spec).table.set_index(["world_size", "lr_scaling"])
    assert table.loc[(2, "none"), "speedup"] == pytest.approx(2.0)
    assert table.loc[(2, "linear"), "speedup"] == pytest.approx(1.6)
    assert table.loc[(2, "linear_warmup"), "speedup"] == pytest.approx(4.0)
    assert table.loc[(2, "none"), "book_speedup"] == pytest.approx(707 / 393)


# --- 7. each rank its own random stream once the model is built ---------------------------------------
def test_ranks_share_initial_weights_but_not_dropout_masks(monkeypatch):
    built = {}
    real_build = ddp_train.build_model

    def build(name, classes, **options):
        model = real_build(name, classes, **options)
        built.setdefault("weights", []).append([p.detach().clone() for p in model.parameters()])
        return model

    monkeypatch.setattr(ddp_train, "build_model", build)
    masks = []
    for rank in (0, 1):
        ddp_train.train(_cfg(seed=3, world_size=2), RankContext(rank=rank, world_size=2))  # no process group
        assert torch.initial_seed() == 3 + rank
        masks.append(nn.functional.dropout(torch.ones(1000), 0.5))
    assert all(torch.equal(a, b) for a, b in zip(*built["weights"]))
    assert not torch.equal(masks[0], masks[1])
    ddp_train.seed_rank(3, 1)
    assert torch.equal(nn.functional.dropout(torch.ones(1000), 0.5), masks[1])


# --- 8. bf16 on a GPU: native only, on the cell's device, and a convolution probed ------------------
def test_bf16_on_a_gpu_that_would_emulate_it_is_a_skip(monkeypatch):
    asked = []

    @contextmanager
    def on_device(device):
        asked.append(("device", device))
        yield

    monkeypatch.setattr(torch.cuda, "device", on_device)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **kw: asked.append(kw) or False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    reason = precision.autocast_unsupported(CUDA1, "bf16")
    assert "V100" in reason and "7.0" in reason and "no native bf16" in reason
    assert asked == [("device", CUDA1), {"including_emulation": False}]


def test_a_convolution_autocast_cannot_run_is_a_skip(monkeypatch):
    def no_bf16_conv(*args, **kwargs):
        raise RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\nmore detail")

    monkeypatch.setattr(nn.functional, "conv2d", no_bf16_conv)
    reason = precision.autocast_unsupported(torch.device("cpu"), "bf16")
    assert reason == "torch.autocast cannot run bf16 on cpu: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"


# --- 9. D12.2 sized to the device ------------------------------------------------------------------
def test_the_async_matrix_grows_until_launch_cost_is_a_small_share():
    launch_s, flops_s = 20e-6, 50e12  # a recent GPU: 20 us to return, 50 TFLOP/s

    def measure(n):
        return launch_s, launch_s + 2 * n ** 3 / flops_s

    assert asynchronous.sized_to_device(1000, CUDA0, measure) == 2000
    assert asynchronous.sized_to_device(1000, torch.device("cpu"), measure) == 1000
    assert asynchronous.sized_to_device(1000, CUDA0, lambda n: (1.0, 1.0)) == asynchronous.MAX_MATRIX_SIZE


# --- 10. torch.compile on CUDA: Triton's compiler, and CUDA graphs timed under no_grad -----------------
def test_inductor_on_cuda_without_triton_or_a_c_compiler_is_a_skip(monkeypatch):
    import torch.utils._triton as triton_probe

    monkeypatch.setattr(triton_probe, "has_triton", lambda: False)
    assert "needs Triton" in hybridize.inductor_problem("cuda")
    monkeypatch.setattr(triton_probe, "has_triton", lambda: True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(hybridize.shutil, "which", lambda name: None)
    assert "C compiler for Triton" in hybridize.inductor_problem("cuda")
    monkeypatch.setattr(hybridize.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert hybridize.inductor_problem("cuda") is None


@pytest.mark.parametrize("execution, mode, device, graphs", [
    ("compile", "reduce-overhead", CUDA0, True),
    ("compile", "max-autotune", CUDA0, True),
    ("compile", "max-autotune-no-cudagraphs", CUDA0, False),
    ("compile", "reduce-overhead", torch.device("cpu"), False),
    ("script", "reduce-overhead", CUDA0, False),
])
def test_cuda_graph_modes_are_timed_without_autograd(execution, mode, device, graphs):
    assert hybridize.cuda_graphs(execution, mode, device) == graphs


def test_a_cpu_cell_reports_that_autograd_was_on():
    cfg = make_config({"experiment": "hybridize", "model": "mlp_d2l", "batch_size": 1, "forward_calls": 5,
                       "warmup_calls": 0, "timing_repeats": 1, "threads": 1})
    assert hybridize.run(cfg)["autograd_on"] == 1.0


def test_batches_split_into_indices_keep_the_old_order():
    """train_epochs now asks for indices; the seed must give the same batches as before."""
    split = Split(torch.arange(10).float().view(10, 1, 1, 1), torch.arange(10))
    from harness.training.data import batches, shuffled_indices

    old = [y for _, y in batches(split, 4, torch.Generator().manual_seed(5))]
    new = list(shuffled_indices(10, 4, torch.Generator().manual_seed(5)))
    assert all(torch.equal(a, b) for a, b in zip(old, new))
