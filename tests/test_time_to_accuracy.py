"""Time to accuracy: checks off the clock, the first check that meets the target, stopping there,
a baseline's own target, and "not reached" recorded as such."""

from __future__ import annotations

import time

import pytest
import torch

from harness.cells import run_single
from experiments import make_config
from harness.training.data import load_splits
from harness.errors import UserError
from harness.training.models import build_model
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.train import make_optimizer, train_epochs
from conftest import TINY_BASE, mlflow_client


def _scripted(accuracies):
    """An evaluate() that returns these accuracies in turn."""
    values = iter(accuracies)
    return lambda: next(values)


def test_the_first_check_that_meets_the_target_gives_the_training_seconds_until_then():
    watch = AccuracyWatch(_scripted([0.3, 0.6, 0.5, 0.7]), target=0.55, per_epoch=2)
    for i in range(4):
        watch.check(epochs=(i + 1) / 2, seconds=1.5, samples=100)
    assert watch.metrics() == {"target_reached": 1.0, "epochs_trained": 2.0, "target_accuracy": 0.55,
                               "time_to_accuracy_s": 3.0, "epochs_to_accuracy": 1.0}
    assert not watch.should_stop  # only with stop=True
    # A data-parallel run gives the slowest rank's seconds at each check.
    assert watch.metrics(slowest_seconds=[2.0, 4.5, 6.0, 8.0])["time_to_accuracy_s"] == 4.5


def test_a_target_never_met_is_recorded_as_not_reached_not_as_a_time():
    watch = AccuracyWatch(_scripted([0.3, 0.4]), target=0.9)
    watch.check(epochs=1, seconds=2.0, samples=10)
    watch.check(epochs=2, seconds=2.0, samples=10)
    metrics = watch.metrics()
    assert metrics == {"target_reached": 0.0, "epochs_trained": 2.0, "target_accuracy": 0.9}
    assert "time_to_accuracy_s" not in metrics and "epochs_to_accuracy" not in metrics


def test_a_baselines_target_is_its_own_accuracy_after_epoch_n():
    watch = AccuracyWatch(_scripted([0.2, 0.5, 0.45, 0.48]), from_epoch=2, stop=True, per_epoch=2)
    watch.check(epochs=0.5, seconds=1.0, samples=1)
    watch.check(epochs=1.0, seconds=1.0, samples=1)
    assert watch.goal() is None and not watch.should_stop      # epoch 2 has not ended yet
    watch.check(epochs=1.5, seconds=1.0, samples=1)
    watch.check(epochs=2.0, seconds=1.0, samples=1)
    # The target is 0.48, the accuracy at the end of epoch 2; epoch 1 had already met it (0.5).
    assert watch.goal() == 0.48 and watch.should_stop
    assert watch.metrics()["time_to_accuracy_s"] == 2.0 and watch.metrics()["epochs_to_accuracy"] == 1.0


def _tiny_training(watch, epochs=2):
    data = load_splits("synthetic", "", (1, 16, 16), train_limit=256, test_limit=64)
    torch.manual_seed(0)
    model = build_model("tiny_cnn")
    cfg = make_config({"optimizer": "sgd", "lr": 0.05})
    seen = []
    start = time.perf_counter()
    times = train_epochs(model, make_optimizer(cfg, model), data.train, epochs=epochs, batch_size=32,
                         device=torch.device("cpu"), generator=torch.Generator().manual_seed(0),
                         on_epoch=lambda e, m: seen.append(m), watch=watch)
    return times, seen, time.perf_counter() - start


def test_every_check_is_outside_the_clock():
    def slow_evaluate():
        time.sleep(0.5)
        return 0.1

    watch = AccuracyWatch(slow_evaluate, target=0.99, per_epoch=2)
    times, seen, wall = _tiny_training(watch, epochs=1)
    assert len(watch.checkpoints) == 2
    assert wall - times[0] >= 1.0, "the two half-second checks were counted as training"
    assert watch.checkpoints[-1].seconds == pytest.approx(times[0])
    assert watch.checkpoints[-1].samples == 256 and seen[0]["epoch_test_accuracy"] == 0.1


def test_stop_at_target_ends_training_at_the_check_that_met_it():
    watch = AccuracyWatch(_scripted([0.2, 0.95]), target=0.9, stop=True, per_epoch=4)
    times, seen, _ = _tiny_training(watch, epochs=3)
    assert len(watch.checkpoints) == 2 and len(times) == 1 and len(seen) == 1   # stopped in epoch 1
    assert watch.checkpoints[-1].samples == 128 and watch.metrics()["epochs_trained"] == 0.5
    assert watch.metrics()["time_to_accuracy_s"] == pytest.approx(times[0])


def test_a_run_that_misses_its_target_is_logged_as_not_reached(store):
    # lr 1e-6 for one epoch: the tiny CNN stays near chance, far from 90%.
    cfg = make_config({**TINY_BASE, "experiment": "pruning", "epochs": 1, "warmup_epochs": 0, "lr": 1e-6,
                       "target_accuracy": 0.9, "stop_at_target": True})
    result = run_single(cfg, store)
    run = mlflow_client(store).get_run(result.run_id).data
    assert run.metrics["target_reached"] == 0.0 and run.metrics["target_accuracy"] == 0.9
    assert "time_to_accuracy_s" not in run.metrics and "epochs_to_accuracy" not in run.metrics
    assert run.metrics["test_accuracy"] < 0.9
    assert run.metrics["lr_effective"] == 1e-6 and "lr_effective" not in run.params   # a metric, never a param


def test_a_run_that_meets_its_target_logs_when_and_stops_there(store):
    cfg = make_config({**TINY_BASE, "experiment": "amp", "epochs": 4, "warmup_epochs": 0, "target_accuracy": 0.5,
                       "stop_at_target": True, "evals_per_epoch": 2})
    result = run_single(cfg, store)
    client = mlflow_client(store)
    run = client.get_run(result.run_id).data
    assert run.metrics["target_reached"] == 1.0
    assert 0 < run.metrics["time_to_accuracy_s"] <= run.metrics["train_time_s"] + 1e-9
    assert run.metrics["epochs_to_accuracy"] == run.metrics["epochs_trained"] < 4   # stopped at that check
    history = client.get_metric_history(result.run_id, "epoch_test_accuracy")
    assert history[-1].value >= 0.5 and all(m.value < 0.5 for m in history[:-1])


@pytest.mark.parametrize("values, words", [
    ({"stop_at_target": True}, ["stop_at_target needs a target"]),
    ({"target_accuracy": 0.5, "target_from_epoch": 1}, ["target_accuracy or target_from_epoch, not both"]),
    ({"target_from_epoch": 3, "epochs": 2}, ["target_from_epoch 3 is past the last of 2 epochs"]),
    ({"target_accuracy": 1.5}, ["target_accuracy", "1"]),
    ({"evals_per_epoch": 0}, ["evals_per_epoch"]),
])
def test_target_settings_that_cannot_work_are_one_sentence(values, words):
    with pytest.raises(UserError) as err:
        make_config(values)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_data_parallel_ranks_stop_together_and_time_the_slowest_rank(store):
    cfg = make_config({**TINY_BASE, "experiment": "data_parallel", "epochs": 4, "warmup_epochs": 0,
                       "world_size": 2, "threads": 1, "target_accuracy": 0.5, "stop_at_target": True})
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    m = result.metrics
    assert m["target_reached"] == 1.0 and m["epochs_trained"] == m["epochs_to_accuracy"] < 4
    assert m["time_to_accuracy_s"] == pytest.approx(max(m["rank0_train_time_s"], m["rank1_train_time_s"]))
    assert m["ranks_params_identical"] == 1.0
