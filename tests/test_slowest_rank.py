"""One slowest-rank reduction (harness/distributed/slowest_rank.py) for every experiment that trains on
ranks: the numbers it reports, and the metric names and values a data-parallel cell logs from it."""

import torch

from harness.distributed.ddp_train import merge
from harness.distributed.rank import RankContext
from harness.distributed.slowest_rank import slowest_rank
from harness.training.timing import spread

# Rank 0 is slower in epoch 1, rank 1 in epoch 0: no single rank is the slowest of every epoch.
TWO_RANKS = [{"times": [1.0, 3.0], "checkpoints": [1.0, 4.0], "warmup": 0.5, "rss": 100.0},
             {"times": [2.0, 1.5], "checkpoints": [2.0, 3.5], "warmup": 0.25, "rss": 120.0}]


def test_the_slowest_rank_times_each_epoch_the_cell_and_each_checkpoint():
    slowest = slowest_rank(TWO_RANKS)
    assert slowest.epoch_times == [2.0, 3.0]
    assert slowest.rank_times == [4.0, 3.5]
    assert slowest.train_time_s == 4.0   # the slowest rank's sum, not the epochs' maxima summed (5.0)
    assert slowest.checkpoints == [2.0, 4.0]
    assert slowest.warmup_time_s == 0.5
    assert slowest.metrics() == {"train_time_s": 4.0}
    assert slowest.metrics(each_rank=True, spread=True, memory=True) == {
        "train_time_s": 4.0, "rank_time_spread_s": 0.5, "rank0_train_time_s": 4.0, "rank1_train_time_s": 3.5,
        "peak_rss_mb": 120.0}


def test_one_rank_is_the_same_reduction_over_a_list_of_one():
    slowest = slowest_rank([{"times": [1.0, 2.0]}])
    assert slowest.epoch_times == [1.0, 2.0] and slowest.checkpoints == []
    assert slowest.metrics(each_rank=True) == {"train_time_s": 3.0, "rank0_train_time_s": 3.0}


def test_a_data_parallel_cell_reports_the_same_names_and_values_as_before():
    """ddp_train.merge's result, written out from the formulas it had before the reduction was shared."""
    everyone = [{**TWO_RANKS[0], "losses": [0.5, 0.25], "digest": "same"},
                {**TWO_RANKS[1], "losses": [0.75, 0.5], "digest": "same"}]
    result = merge(None, RankContext(world_size=2), everyone, 0.9, 0.1, 100, 50, 16, 0.2)
    epochs = spread([2.0, 3.0])
    assert result == {
        "train_time_s": 4.0, "test_accuracy": 0.9, "samples_per_s": 100 * 2 / 4.0,
        "epoch_time_median_s": epochs["median"], "epoch_time_iqr_s": epochs["iqr"], "epoch_time_mean_s": 2.5,
        "warmup_time_s": 0.5, "eval_time_s": 0.1, "train_samples": 100, "test_samples": 50, "ranks": 2,
        "batch_per_rank": 16, "global_batch": 32, "final_lr": 0.2, "threads_used": torch.get_num_threads(),
        "ranks_params_identical": 1.0, "rank_time_spread_s": 0.5, "epoch_times": [2.0, 3.0],
        "epoch_losses": [0.625, 0.375], "param_digests": ["same", "same"],
        "rank0_train_time_s": 4.0, "rank1_train_time_s": 3.5,
    }  # no peak_rss_mb: outside a launched rank the cell runner measures the peak itself


def test_the_training_metrics_are_named_once_and_every_builder_and_descriptor_uses_them():
    """catalogue.TRAINING_METRICS is what training_metrics builds; the DDP target's merge and
    dp_scratch build theirs with it, and every experiment whose run builds them declares them all (a
    name retyped in a descriptor, or one the builder adds without TRAINING_METRICS, fails here)."""
    import experiments
    from experiments import dp_scratch
    from harness.fields.catalogue import TRAINING_METRICS
    from harness.training.train import training_metrics

    built = training_metrics([1.0, 3.0], [0.5], train_samples=10, test_samples=5, accuracy=0.5, eval_seconds=0.1)
    assert tuple(built) == TRAINING_METRICS
    merged = merge(None, RankContext(world_size=2), [{**r, "losses": [0.1, 0.1], "digest": "d"} for r in TWO_RANKS],
                   0.9, 0.1, 100, 50, 16, 0.2)
    assert set(TRAINING_METRICS) <= set(merged)
    scratch = dp_scratch._summary(dp_scratch.DpScratchConfig(epochs=2), _Data(), [1.0, 2.0], 0.5, 0.9, 0.1)
    assert set(scratch) == {*TRAINING_METRICS, "copies"} and scratch["samples_per_s"] == 100 * 2 / 3.0
    for name in ("amp", "data_parallel", "dp_scratch", "pruning", "recipe"):
        declared = experiments.get(name).metrics
        assert set(TRAINING_METRICS) <= set(declared), name
        assert len(declared) == len(set(declared)), f"{name} declares a metric twice"


class _Data:
    train, test = range(100), range(50)
