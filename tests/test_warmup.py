"""A warm-up must not change what is trained: a cell run with warmup_epochs=1 ends where
the same cell with warmup_epochs=0 ends (same per-epoch losses, test accuracy, final parameters), in
the single-process loop (pruning, amp), the DDP worker (in this process and on two gloo ranks) and
both implementations of dp_scratch. Each comparison is paired with the old behaviour (the warm-up
left in place, `restored` patched out), which must differ, so the comparison can fail.

T6.1's epoch before pruning is not a warm-up: it is kept, and only pruned rows train it."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest
import torch
from torch import nn

import experiments.amp as amp
import experiments.data_parallel as data_parallel
import experiments.dp_scratch as dp_scratch
import experiments.pruning as pruning
from harness.cells import run_single
from experiments import make_config
from harness.distributed import ddp_train
from harness.distributed.ddp_train import LrSchedule, param_digest
from harness.distributed.launch import launch
from harness.distributed.rank import RankContext
from harness.errors import CellSkipped
from harness.training.precision import Precision
from harness.training.warmup import restored
from conftest import DP_SCRATCH_DDP, mlflow_client, skip_unless_ci

DIGITS = {"model": "tiny_cnn", "dataset": "digits", "train_limit": 256, "test_limit": 128, "epochs": 2,
          "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "threads": 1}


def _left_in_place(*states):
    """The behaviour before issue 10: the warm-up trains and nothing is put back."""
    return contextlib.nullcontext()


# --- the helper itself ------------------------------------------------------------------------------
class Dropping(nn.Module):
    """BatchNorm buffers and a dropout mask: state and randomness a training step changes."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))

    def forward(self, x):
        return self.body(x)


def _state(model, optimizer, generator):
    """Everything a training step can change, as plain values to compare."""
    return ({k: v.clone() for k, v in model.state_dict().items()},
            [p.grad for p in model.parameters()],
            {i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
             for i, s in optimizer.state_dict()["state"].items()},
            [g["lr"] for g in optimizer.param_groups],
            generator.get_state().clone(), torch.get_rng_state().clone(), random.getstate(),
            np.random.get_state()[1].copy())


def _same(a, b) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_restored_puts_back_weights_buffers_optimizer_generators_and_random_streams(optimizer_name):
    torch.manual_seed(0)
    model = Dropping()
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer_name == "sgd"
                 else torch.optim.Adam(model.parameters(), lr=0.1))
    order = torch.Generator().manual_seed(3)
    schedule = LrSchedule(make_config({"experiment": "data_parallel", "lr": 0.1, "world_size": 2,
                                       "lr_scaling": "linear_warmup", "lr_warmup_epochs": 1}), 2, 10)
    before = _state(model, optimizer, order)

    with restored(model, optimizer, order, schedule):
        for _ in range(3):
            idx = torch.randperm(16, generator=order)[:8]
            x = torch.randn(16, 4)[idx]
            for group in optimizer.param_groups:
                group["lr"] = schedule.next()
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        random.random(), np.random.rand()
        inside = _state(model, optimizer, order)

    after = _state(model, optimizer, order)
    # The block really changed each part (else the comparison below proves nothing) ...
    assert all(not _same(b, i) for b, i in zip(before, inside))
    # ... and every part is back, bit for bit, in the same tensors the optimizer holds.
    assert all(_same(b, a) for b, a in zip(before, after))
    assert schedule.step == 0
    assert all(p is q for p, q in zip(model.parameters(), optimizer.param_groups[0]["params"]))


def test_restored_puts_back_the_grad_scaler_and_its_skip_count():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Precision("cpu", "fp16", torch.amp.GradScaler("cpu"))
    precision.backward_step(model(torch.ones(1, 2)).sum(), optimizer)  # a normal step: the scale exists
    scale = precision.scaler.get_scale()
    with restored(model, optimizer, precision):
        precision.backward_step(model(torch.ones(1, 2)).sum() * float("inf"), optimizer)  # skipped, scale halves
        assert precision.scaler.get_scale() == scale / 2 and precision.skipped_steps() == 1
    assert precision.scaler.get_scale() == scale and precision.skipped_steps() == 0


def test_restored_puts_back_plain_tensors_and_refuses_what_it_cannot_snapshot():
    p = torch.ones(3, requires_grad=True)
    with restored(p):
        (p * 2).sum().backward()
        with torch.no_grad():
            p -= p.grad
    assert torch.equal(p, torch.ones(3)) and p.grad is None
    with pytest.raises(TypeError, match="cannot snapshot a str"):
        with restored("model"):
            pass


# --- the single-process loop: pruning and amp -------------------------------------------------------
def _run(experiment, values: dict) -> tuple[dict, list[float], str]:
    """The experiment's metrics, its per-epoch training losses, and a digest of the final parameters
    (taken at the last evaluation, which is of the trained model)."""
    losses, digests = [], []
    evaluate = experiment.evaluate

    def recording(model, *args, **kwargs):
        digests.append(param_digest(model))
        return evaluate(model, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "evaluate", recording)
        metrics = experiment.run(make_config(values), lambda epoch, m: losses.append(m["train_loss"]))
    return metrics, losses, digests[-1]


@pytest.mark.parametrize("experiment, values", [
    (pruning, {"experiment": "pruning", "sparsity": 0.5, "pruning_backend": "torch-pruning"}),
    (pruning, {"experiment": "pruning", "sparsity": 0.0, "pruning_backend": "torch-pruning"}),
    (amp, {"experiment": "amp", "dtype": "bf16"}),
], ids=["pruning-0.5", "pruning-0.0", "amp-bf16"])
def test_a_warm_up_epoch_changes_nothing_that_is_trained(experiment, values, monkeypatch):
    cell = {**DIGITS, **values}
    cold, cold_losses, cold_params = _run(experiment, {**cell, "warmup_epochs": 0})
    warm, warm_losses, warm_params = _run(experiment, {**cell, "warmup_epochs": 1})
    assert warm["test_accuracy"] == cold["test_accuracy"]
    assert warm_losses == cold_losses and len(cold_losses) == cell["epochs"]
    assert warm_params == cold_params
    assert warm["warmup_time_s"] > 0 == cold["warmup_time_s"]  # the warm-up did run, and is still logged

    monkeypatch.setattr(experiment, "restored", _left_in_place)
    _, trained_losses, trained_params = _run(experiment, {**cell, "warmup_epochs": 1})
    assert trained_losses != cold_losses and trained_params != cold_params


def test_amp_fp16_with_a_grad_scaler_warms_up_without_training():
    cell = {**DIGITS, "experiment": "amp", "dtype": "fp16", "grad_scaler": True, "epochs": 1}
    try:
        cold, _, cold_params = _run(amp, {**cell, "warmup_epochs": 0})
    except CellSkipped as skipped:  # this CPU's autocast cannot run fp16 (the pinned torch on CI's can)
        skip_unless_ci(str(skipped))
    warm, _, warm_params = _run(amp, {**cell, "warmup_epochs": 1})
    assert warm_params == cold_params and warm["test_accuracy"] == cold["test_accuracy"]
    assert (warm["grad_scale_final"], warm["scaler_skipped_steps"]) == (cold["grad_scale_final"],
                                                                       cold["scaler_skipped_steps"])


# --- T6.1: the epoch before pruning is the book's procedure, not a warm-up ---------------------------
def test_only_pruned_rows_train_the_epoch_before_pruning():
    cell = {**DIGITS, "experiment": "pruning", "pruning_backend": "torch-pruning", "warmup_epochs": 0}
    unpruned, _, unpruned_params = _run(pruning, {**cell, "sparsity": 0.0})
    pruned, _, pruned_params = _run(pruning, {**cell, "sparsity": 0.5})
    assert unpruned["pretrain_epochs_trained"] == 0 and unpruned["pretrain_time_s"] == 0
    assert pruned["pretrain_epochs_trained"] == 1 and pruned["pretrain_time_s"] > 0
    # The unpruned row ignores pretrain_epochs; for a pruned row it is real training, and it is kept.
    assert _run(pruning, {**cell, "sparsity": 0.0, "pretrain_epochs": 0})[2] == unpruned_params
    without, _, without_params = _run(pruning, {**cell, "sparsity": 0.5, "pretrain_epochs": 0})
    assert without["pretrain_epochs_trained"] == 0 and without["param_count"] == pruned["param_count"]
    assert without_params != pruned_params


def test_the_logged_cells_agree_with_and_without_a_warm_up_and_say_which_row_pretrained(store):
    cell = {**DIGITS, "experiment": "pruning", "pruning_backend": "torch-pruning", "epochs": 1}
    logged = {}
    for sparsity in (0.0, 0.5):
        for warmup_epochs in (0, 1):
            result = run_single(make_config({**cell, "sparsity": sparsity, "warmup_epochs": warmup_epochs}), store)
            assert result.outcome == "ok", result.reason
            logged[sparsity, warmup_epochs] = mlflow_client(store).get_run(result.run_id).data
    for sparsity, pretrained in ((0.0, 0), (0.5, 1)):
        cold, warm = logged[sparsity, 0], logged[sparsity, 1]
        assert warm.metrics["test_accuracy"] == cold.metrics["test_accuracy"]
        assert warm.metrics["pretrain_epochs_trained"] == cold.metrics["pretrain_epochs_trained"] == pretrained
        assert warm.params["pretrain_epochs"] == "1"  # logged as a param: the experiment reads it


# --- the DDP worker ------------------------------------------------------------------------------------
DDP = {"experiment": "data_parallel", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 128,
       "test_limit": 64, "epochs": 2, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
       "threads": 1, "lr_scaling": "linear_warmup", "lr_warmup_epochs": 1, "backend": "gloo"}


def _same_training(a: dict, b: dict) -> bool:
    return (a["test_accuracy"], a["epoch_losses"], a["param_digests"], a["final_lr"]) == \
           (b["test_accuracy"], b["epoch_losses"], b["param_digests"], b["final_lr"])


def test_the_ddp_worker_in_this_process_warms_up_without_training(monkeypatch):
    def train(warmup_epochs):
        cfg = make_config({**DDP, "world_size": 1, "warmup_epochs": warmup_epochs})
        return ddp_train.train(cfg, RankContext(device=torch.device("cpu")))

    cold, warm = train(0), train(1)
    assert _same_training(warm, cold) and warm["warmup_time_s"] > 0
    monkeypatch.setattr(ddp_train, "restored", _left_in_place)
    assert train(1)["param_digests"] != cold["param_digests"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_gloo_ranks_warm_up_without_training():
    def ranks(warmup_epochs):
        return launch(make_config({**DDP, "world_size": 2, "warmup_epochs": warmup_epochs}), data_parallel.TARGET)

    cold, warm = ranks(0), ranks(1)
    assert warm["ranks"] == 2 and warm["ranks_params_identical"] == 1.0 and warm["warmup_time_s"] > 0
    assert _same_training(warm, cold)


# --- dp_scratch: the hand-written copies and its DDP ranks --------------------------------------------
SCRATCH = {"experiment": "dp_scratch", "model": "lenet_d2l", "dataset": "digits", "train_limit": 128,
           "test_limit": 64, "epochs": 2, "batch_size": 32, "lr": 0.2, "threads": 1, "world_size": 2}


def test_the_scratch_copies_warm_up_without_training(monkeypatch):
    cfg = make_config({**SCRATCH, "dp_impl": "scratch"})
    data, devices = dp_scratch._data(cfg), [torch.device("cpu")] * 2
    cold, _, _ = dp_scratch.train_copies(cfg, data, devices)
    warm, times, _ = dp_scratch.train_copies(cfg, data, devices, warmup_epochs=1)
    assert len(times) == cfg.epochs
    assert all(torch.equal(w, c) for ws, cs in zip(warm, cold) for w, c in zip(ws, cs))
    monkeypatch.setattr(dp_scratch, "restored", _left_in_place)
    trained, _, _ = dp_scratch.train_copies(cfg, data, devices, warmup_epochs=1)
    assert not torch.equal(trained[0][0], cold[0][0])


def test_a_scratch_cell_with_a_warm_up_reaches_the_same_accuracy():
    cold = dp_scratch.run(make_config({**SCRATCH, "dp_impl": "scratch", "warmup_epochs": 0}))
    warm = dp_scratch.run(make_config({**SCRATCH, "dp_impl": "scratch", "warmup_epochs": 1}))
    for metric in ("test_accuracy", "max_param_diff", "first_step_param_diff", "params_match"):
        assert warm[metric] == cold[metric], metric


@pytest.mark.slow
@pytest.mark.multiprocess
def test_dp_scratch_ddp_ranks_warm_up_without_training(dp_scratch_ddp_without_warmup):
    # The cold cell is conftest.py's run (shared with test_parallel_sweeps): SCRATCH on two gloo ranks.
    assert DP_SCRATCH_DDP == {**SCRATCH, "dp_impl": "ddp", "backend": "gloo"}
    cold = dp_scratch_ddp_without_warmup
    warm = dp_scratch.run(make_config({**DP_SCRATCH_DDP, "warmup_epochs": 1}))
    # max_param_diff compares with one device trained `epochs` epochs and no warm-up: the same figure
    # means the ranks ended on the same parameters.
    for metric in ("test_accuracy", "max_param_diff", "first_step_param_diff", "params_match"):
        assert warm[metric] == cold[metric], metric
