"""Data-parallel cells: real torchrun processes over gloo on the tiny CNN and synthetic data,
crash and hang handling, and the skip reasons for what this machine lacks."""

from __future__ import annotations

import socket
import sys
import threading
import time

import psutil
import pytest
import torch

import experiments.data_parallel as data_parallel
from experiments import make_config
from harness.machine import hardware
from harness.distributed import placement
from harness.distributed.ddp_train import LrSchedule
from harness.distributed.launch import LaunchFailed, launch, torchrun_command
from harness.errors import CellSkipped, UserError
from harness.cells import run_single
from harness.store.tracking import OUTCOME, REASON
from conftest import mlflow_client, skip_unless_ci

TINY = {"experiment": "data_parallel", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 128,
        "test_limit": 64, "epochs": 2, "warmup_epochs": 0, "batch_size": 32, "lr": 0.01, "threads": 1,
        "world_size": 2, "backend": "gloo"}


def _cfg(**changes):
    return make_config({**TINY, **changes})


def _processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(text in part for part in (p.info["cmdline"] or [])):
            found.append(p)
    return found


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_gloo_ranks_end_identical_and_the_logged_time_is_the_slowest_ranks(store, monkeypatch):
    # Rank 1 sleeps 1.5 s inside its clock after its last step, so the ranks' times differ.
    monkeypatch.setenv("HARNESS_TEST_FAULT", "delay:1:1.5")
    result = run_single(_cfg(), store)
    assert result.outcome == "ok", result.reason
    metrics = mlflow_client(store).get_run(result.run_id).data.metrics
    assert metrics["ranks"] == 2 and metrics["ranks_params_identical"] == 1.0
    rank0, rank1 = metrics["rank0_train_time_s"], metrics["rank1_train_time_s"]
    assert rank1 - rank0 > 1.0
    assert metrics["train_time_s"] == pytest.approx(max(rank0, rank1))
    assert metrics["threads_used"] == 1  # the ranks' thread count, not the sweep process's
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_samples"] == 64
    history = mlflow_client(store).get_metric_history(result.run_id, "epoch_time_s")
    assert [m.step for m in history] == [0, 1]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_nodes_meet_at_a_localhost_rendezvous():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results, errors = {}, []

    def node(rank):
        try:
            cfg = _cfg(nnodes=2, node_rank=rank, rdzv_endpoint=f"127.0.0.1:{port}", dist_timeout_s=90)
            results[rank] = launch(cfg, data_parallel.TARGET)
        except Exception as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert results[0]["ranks"] == results[1]["ranks"] == 2
    # Both nodes hand back the same merged result: one process group, two machines.
    assert results[0]["param_digests"] == results[1]["param_digests"]
    assert results[0]["param_digests"][0] == results[0]["param_digests"][1]
    assert results[0]["train_time_s"] == results[1]["train_time_s"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("fault, timeout, says", [("crash:1", 120, "exited with status"),
                                                  ("hang:1", 15, "no progress|exited with status")])
def test_a_crashed_or_hung_rank_fails_the_cell_in_time_and_leaves_no_process(monkeypatch, fault, timeout, says):
    monkeypatch.setenv("HARNESS_TEST_FAULT", fault)
    # "In time" is the failure itself: a hung rank that nothing stopped would hold the test until
    # its timeout mark, not end it with the launcher's sentence.
    with pytest.raises(LaunchFailed, match=says) as failure:
        launch(_cfg(epochs=50, dist_timeout_s=timeout), data_parallel.TARGET)
    workdir = str(failure.value.workdir)
    time.sleep(0.5)
    assert _processes_mentioning(workdir) == []


def test_a_hung_rank_is_caught_by_the_watchdog_when_collectives_would_wait_longer(monkeypatch):
    """The heartbeat watchdog alone: no rank ever beats, so it fires after dist_timeout_s."""
    import harness.distributed.launch as launch_module

    # The rank would end by itself after 60 s, exiting 0: only the watchdog gives "no progress".
    monkeypatch.setattr(launch_module, "torchrun_command",
                        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(60)", str(a[2])])
    with pytest.raises(LaunchFailed, match="no progress for") as failure:
        launch(_cfg(dist_timeout_s=1.5), data_parallel.TARGET)
    assert _processes_mentioning(str(failure.value.workdir)) == []


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(hardware, "usable_cores", lambda: [0, 1])


@pytest.mark.parametrize("changes, reason", [
    ({"backend": "ccl"}, "oneCCL bindings"),
    ({"backend": "mpi"}, "is_mpi_available"),
    ({"backend": "nccl"}, "nccl"),
    ({"world_size": 1, "threads": 16}, "16 threads need 16 cores"),
    ({"world_size": 4, "threads": 1}, "4 rank(s) x 1 thread(s) need 4 cores"),
    ({"world_size": 2, "threads": 2}, "need 4 cores"),
    ({"world_size": 1, "device": "cuda"}, "no usable CUDA GPU"),
])
def test_what_this_machine_lacks_is_a_skip_with_its_reason(two_cores, changes, reason):
    if changes.get("backend") == "ccl" and placement.backend_problem("ccl") is None:
        skip_unless_ci("oneCCL bindings are installed here")  # never by `make install`, so never on CI
    with pytest.raises(CellSkipped) as skip:
        placement.check_can_run(_cfg(**changes))
    assert reason in str(skip.value)


@pytest.mark.parametrize("backend", ["ccl", "mpi"])
def test_one_cpu_process_with_a_backend_other_than_gloo_is_a_skip_not_the_gloo_cell_again(two_cores, backend):
    with pytest.raises(CellSkipped, match=f"one process uses no torch.distributed backend, so backend={backend}"):
        placement.check_can_run(_cfg(world_size=1, threads=2, backend=backend))
    placement.check_can_run(_cfg(world_size=1, threads=2, backend="gloo"))


def test_too_few_gpus_for_the_ranks_is_a_skip(two_cores, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(CellSkipped, match="need 2 GPUs .* has 1"):
        placement.check_can_run(_cfg(device="cuda", backend="gloo"))


def test_a_skipped_cell_is_recorded_with_its_reason(store):
    result = run_single(_cfg(backend="mpi"), store)
    assert result.outcome == "skipped"
    tags = mlflow_client(store).get_run(result.run_id).data.tags
    assert tags[OUTCOME] == "skipped" and "mpi" in tags[REASON]


def test_shapes_that_fit_are_placed_on_their_own_cores(two_cores):
    placement.check_can_run(_cfg(world_size=2, threads=1))
    placement.check_can_run(_cfg(world_size=1, threads=2))
    assert placement.threads_per_rank(_cfg(threads=0)) == 1
    assert placement.rank_cores(1, 1, [4, 5]) == [5]
    assert placement.rank_cores(1, 2, [0, 1, 2, 3]) == [2, 3]


@pytest.mark.parametrize("changes, says", [
    ({"world_size": 3, "nnodes": 2, "rdzv_endpoint": "h:1"}, "multiple of nnodes"),
    ({"nnodes": 2}, "needs rdzv_endpoint"),
    ({"rdzv_endpoint": "nohost"}, "host:port"),
    ({"batch_is_global": True, "batch_size": 33}, "divide evenly"),
    ({"backend": "smoke-signals"}, "backend"),
])
def test_bad_distributed_settings_are_one_sentence(changes, says):
    with pytest.raises(UserError, match=says):
        _cfg(**changes)


def test_torchrun_command_for_one_node_and_for_several(tmp_path):
    one = torchrun_command(_cfg(), tmp_path / "c.json", tmp_path, "m:f")
    assert "--standalone" in one and "--nproc-per-node=2" in one
    two = torchrun_command(_cfg(world_size=4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400"),
                           tmp_path / "c.json", tmp_path, "m:f")
    assert {"--nnodes=2", "--node-rank=1", "--rdzv-endpoint=10.0.0.1:29400", "--nproc-per-node=2"} <= set(two)
    assert "--standalone" not in two


def test_linear_scaling_and_warmup_schedule():
    none = LrSchedule(_cfg(lr=0.1, world_size=4, lr_scaling="none"), 4, 10)
    linear = LrSchedule(_cfg(lr=0.1, world_size=4, lr_scaling="linear"), 4, 10)
    warm = LrSchedule(_cfg(lr=0.1, world_size=4, lr_scaling="linear_warmup", lr_warmup_epochs=2), 4, 10)
    assert none.next() == pytest.approx(0.1) and linear.next() == pytest.approx(0.4)
    lrs = [warm.next() for _ in range(25)]
    assert lrs[0] == pytest.approx(0.1) and lrs[10] == pytest.approx(0.25) and lrs[20:] == [pytest.approx(0.4)] * 5
    assert all(a < b for a, b in zip(lrs[:20], lrs[1:21]))


def test_one_rank_trains_in_this_process_with_the_same_code():
    metrics = data_parallel.run(_cfg(world_size=1, threads=1, epochs=1))
    assert metrics["ranks"] == 1 and metrics["train_time_s"] == metrics["rank0_train_time_s"]
    assert "peak_rss_mb" not in metrics  # the sweep engine measures this process itself
