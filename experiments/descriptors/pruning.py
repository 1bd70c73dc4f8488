"""Does removing Conv2d filters cut training time, and what does it cost in accuracy?

The card of experiment `pruning` (the book's T6.1, ch. 6); its code is experiments/pruning.py.
- Fields: `PruningConfig` below: the book's loop (data splits, optimizer, timed epochs after undone
  warm-up epochs, a target accuracy), the filters removed (`PruningFields`: `sparsity`,
  `pruning_backend` nni or torch-pruning) and `pretrain_epochs`.
- Procedure: train `pretrain_epochs` untimed (pruned rows only, as the book), remove `sparsity` of
  every Conv2d's filters by L1 norm, train `epochs` timed with a new optimizer, test.
- Metrics: the shared training metrics, `param_count` beside `param_count_before`, `prune_time_s`,
  `pretrain_time_s`, FLOPs and MFU, time to accuracy (`EXPERIMENT.metrics`).
"""

from __future__ import annotations

from pydantic import Field

from experiments import Experiment, RunTarget, TRAINING_SENSE
from harness.training import time_to_accuracy
from harness.fields.catalogue import FLOP_METRICS, FLOP_NOTES, TRAINING_CLOCK, TRAINING_METRICS
from harness.fields.config import RunConfig
from harness.fields.field_groups import OptimizerFields, PruningFields, SplitsFields, TargetFields, TrainingLoopFields


class PruningConfig(RunConfig, SplitsFields, OptimizerFields, TrainingLoopFields, TargetFields, PruningFields):
    pretrain_epochs: int = Field(
        1, ge=0, description="T6.1: epochs trained before pruning (the book's procedure: train 1 epoch, prune, "
        "train `epochs` timed); kept, untimed, and only where sparsity > 0 (the book's unpruned row has none).")


EXPERIMENT = Experiment(
    name="pruning",
    title="T6.1: train, prune Conv2d filters by L1 norm, train timed, test",
    run=RunTarget("experiments.pruning:run"),
    clock=TRAINING_CLOCK,
    needs_dataset=True,
    notes=FLOP_NOTES,
    metrics=(*TRAINING_METRICS, "param_count", "param_count_before", "prune_time_s", "pretrain_epochs_trained", "pretrain_time_s",
             *FLOP_METRICS, *time_to_accuracy.METRICS),
    config=PruningConfig,
    sense=TRAINING_SENSE,
    # Models with Conv2d filters to remove (d2l's plain-tensor LeNet has none; the MLP takes no images).
    models=("cnn", "tiny_cnn", "resnet18_d2l", "efficientnet_b0", "efficientnet_b7"),
    smoke={"model": "tiny_cnn", "dataset": "digits", "train_limit": 256, "test_limit": 128, "warmup_epochs": 1,
           "epochs": 1, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "sparsity": 0.5,
           "pruning_backend": "torch-pruning", "eval_every_epoch": True, "target_accuracy": 0.05,
           "evals_per_epoch": 2, "stop_at_target": True, "threads": 1},
)
