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
                               "time_to_accuracy_s": 3.0, "epochs_to_accuracy": 1.0, "accuracy_checks": 4.0,
                               "time_to_accuracy_resolution_s": 1.5, "best_test_accuracy": 0.7}
    assert not watch.should_stop  # only with stop=True
    # A data-parallel run gives the slowest rank's seconds at each check.
    assert watch.metrics(slowest_seconds=[2.0, 4.5, 6.0, 8.0])["time_to_accuracy_s"] == 4.5


def test_a_target_never_met_is_recorded_as_not_reached_not_as_a_time():
    watch = AccuracyWatch(_scripted([0.3, 0.4]), target=0.9)
    watch.check(epochs=1, seconds=2.0, samples=10)
    watch.check(epochs=2, seconds=2.0, samples=10)
    metrics = watch.metrics()
    assert metrics == {"target_reached": 0.0, "epochs_trained": 2.0, "target_accuracy": 0.9, "accuracy_checks": 2.0,
                       "best_test_accuracy": 0.4}
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


def test_a_run_past_its_give_up_time_without_the_target_stops_and_says_so_and_one_that_meets_it_then_does_not():
    late = AccuracyWatch(_scripted([0.3, 0.4, 0.5]), target=0.9, give_up_s=3.0)   # stop not needed to give up
    late.check(epochs=1, seconds=1.5, samples=10)
    assert not late.should_stop
    late.check(epochs=2, seconds=1.5, samples=10)                  # 3.0 s trained, still short of 0.9
    assert late.should_stop and late.gave_up
    assert late.metrics() == {"target_reached": 0.0, "epochs_trained": 2.0, "target_accuracy": 0.9,
                              "accuracy_checks": 2.0, "best_test_accuracy": 0.4, "gave_up": 1.0}

    met = AccuracyWatch(_scripted([0.3, 0.95]), target=0.9, give_up_s=3.0)
    met.check(epochs=1, seconds=1.5, samples=10)
    met.check(epochs=2, seconds=1.5, samples=10)                   # past the time, but at the target: reached
    assert not met.gave_up and met.metrics()["time_to_accuracy_s"] == 3.0 and "gave_up" not in met.metrics()

    # data-parallel: rank 0's decision, broadcast, is every rank's (here rank 0 is not late yet)
    follower = AccuracyWatch(_scripted([0.3]), target=0.9, give_up_s=1.0, agree=lambda late: False)
    follower.check(epochs=1, seconds=5.0, samples=10)
    assert not follower.should_stop
    # a baseline's own target (its epoch-N accuracy) is never given up on
    own = AccuracyWatch(_scripted([0.3, 0.4]), from_epoch=2, give_up_s=1.0)
    own.check(epochs=1, seconds=5.0, samples=10)
    assert not own.should_stop


def test_giving_up_ends_training_at_that_check():
    watch = AccuracyWatch(_scripted([0.1, 0.1, 0.1]), target=0.99, per_epoch=2, give_up_s=1e-9)
    times, seen, _ = _tiny_training(watch, epochs=3)
    assert len(watch.checkpoints) == 1 and len(times) == 1 and watch.metrics()["epochs_trained"] == 0.5


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
    ({"give_up_after_s": 10.0, "target_from_epoch": 1}, ["give_up_after_s needs target_accuracy"]),
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


# --- the fine clock: checks every k steps on a probe, the crossing confirmed on the whole test set --------
def test_a_probe_crossing_counts_only_once_the_whole_test_set_confirms_it_and_the_resolution_goes_with_it():
    whole = _scripted([0.52, 0.61])                       # read only when the probe crosses
    watch = AccuracyWatch(_scripted([0.4, 0.58, 0.5, 0.7]), target=0.55, every=10, confirm=whole)
    for seconds in (1.0, 1.0, 0.5, 0.25):
        watch.check(epochs=0.1, seconds=seconds, samples=10)
    assert [c.whole for c in watch.checkpoints] == [False, True, False, True]
    metrics = watch.metrics()
    # the probe said 0.58 at 2.0 s but the whole set said 0.52: the crossing is the confirmed one at 2.75 s,
    # resolved to the 0.25 s trained since the check before it
    assert metrics["time_to_accuracy_s"] == 2.75 and metrics["time_to_accuracy_resolution_s"] == 0.25
    assert metrics["accuracy_checks"] == 4.0


def test_a_probe_reading_just_under_the_target_is_confirmed_so_a_low_probe_does_not_hold_a_crossing_back():
    # a probe of 400 images at a target of 0.6: two standard errors are 0.049
    watch = AccuracyWatch(_scripted([0.50, 0.56]), target=0.6, every=10, confirm=_scripted([0.61]), probe_n=400)
    watch.check(epochs=0.1, seconds=1.0, samples=10)     # 0.50: too far under, not confirmed
    watch.check(epochs=0.2, seconds=1.0, samples=10)     # 0.56: within 0.049, confirmed at 0.61
    assert [c.whole for c in watch.checkpoints] == [False, True]
    assert watch.metrics()["time_to_accuracy_s"] == 2.0


def test_checks_every_k_steps_end_each_epoch_with_a_check_and_without_k_keep_the_per_epoch_ones():
    assert AccuracyWatch(lambda: 0.0, target=0.5, every=4).bounds(10) == [4, 8, 10]
    assert AccuracyWatch(lambda: 0.0, target=0.5, every=20).bounds(10) == [10]
    assert AccuracyWatch(lambda: 0.0, target=0.5, per_epoch=4).bounds(8) == [2, 4, 6, 8]
    assert AccuracyWatch(lambda: 0.0, target=0.5, per_epoch=4).bounds(2) == [1, 2]


def test_the_probe_is_stratified_fixed_whatever_the_seed_and_the_whole_set_when_asked_for_more():
    from harness.training.accuracy_probe import stratified_indices

    labels = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    probe = stratified_indices(labels, 20)
    assert torch.bincount(labels[probe]).tolist() == [12, 6, 2]      # each class in proportion
    torch.manual_seed(123)
    assert torch.equal(stratified_indices(labels, 20), probe)        # the same images in every run
    assert torch.equal(stratified_indices(labels, 0), torch.arange(100))
    assert len(stratified_indices(labels, 7)) == 7


def test_probe_size_in_an_experiment_without_a_probe_is_one_sentence():
    cfg = make_config({**TINY_BASE, "experiment": "pruning", "target_accuracy": 0.5, "probe_size": 32})
    with pytest.raises(UserError, match="probe_size needs"):
        AccuracyWatch.from_config(cfg, lambda: 0.0)


def test_the_fine_clock_on_digits_checks_every_k_steps_and_logs_its_resolution():
    cfg = make_config({"experiment": "recipe", "model": "tiny_cnn", "dataset": "digits", "train_limit": 512,
                       "test_limit": 256, "epochs": 2, "batch_size": 32, "lr": 0.005, "optimizer": "adam",
                       "threads": 1, "target_accuracy": 0.6, "stop_at_target": True, "check_every_samples": 64,
                       "probe_size": 64})
    import experiments

    metrics = experiments.get("recipe").run(cfg)
    assert metrics["target_reached"] == 1.0
    # 16 steps an epoch of 32 samples, a check every 64 samples (2 steps): the crossing is known to within
    # 2 steps' training seconds
    assert 0 < metrics["time_to_accuracy_resolution_s"] < metrics["time_to_accuracy_s"]
    assert metrics["accuracy_checks"] == metrics["epochs_to_accuracy"] * 16 / 2


def test_a_check_interval_in_samples_is_whole_steps_of_each_runs_own_global_batch():
    from harness.training.time_to_accuracy import check_every_steps

    base = {"experiment": "recipe", "model": "tiny_cnn", "dataset": "digits", "target_accuracy": 0.5,
            "check_every_samples": 1024}
    assert check_every_steps(make_config({**base, "batch_size": 64})) == 16
    assert check_every_steps(make_config({**base, "batch_size": 512})) == 2     # the same share of training
    assert check_every_steps(make_config({**base, "batch_size": 4096})) == 1    # at least one step
    assert check_every_steps(make_config({**base, "batch_size": 256, "world_size": 2})) == 2   # each rank's batch
    assert check_every_steps(make_config({**base, "check_every_samples": 0})) == 0
