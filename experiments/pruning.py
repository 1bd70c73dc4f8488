"""T6.1 (book ch. 6): does removing Conv2d filters cut training time, and what does it cost in accuracy?

The book's procedure: build the CNN, train one epoch, prune every Conv2d by L1 norm and physically
remove the filters, build a new optimizer, train 10 timed epochs, test. The epoch before pruning is
`pretrain_epochs` (kept: it is part of the procedure), run only for pruned rows: the book's unpruned
row trained its 10 epochs from initialisation. The timing warm-up (`warmup_epochs`) comes after
pruning, on the model and optimizer the clock then times, and is undone (harness.training.warmup).

Two backends take the same fields (`sparsity`, `pruning_backend`) and keep the same filters: `nni`,
the book's tool (L1NormPruner on Conv2d, then ModelSpeedup removes the pruned filters and the
matching inputs of the next layers; NNI 3.0 needs two fixes to run on current torch, applied in
memory by harness/training/pruning/nni_compat.py), and `torch-pruning` (DepGraph with L1 magnitude, per-layer
ratios chosen so it keeps exactly the filters NNI keeps; tested: same architecture, same surviving
weights). The book's exact figure is a test and a check: 50% sparsity leaves the CNN with 1,059,306
of 2,122,186 parameters (`param_count`, beside `param_count_before`).

    harness run pruning --set sparsity=0.5 --set dataset=digits --set epochs=2
"""

from __future__ import annotations

import torch

from experiments.descriptors.pruning import PruningConfig
from harness.training.data import load_splits
from harness.training.flops import flop_metrics, flops_per_sample
from harness.training.models import MODELS, build_model, count_parameters
from harness.training.pruning import prune_conv_filters
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.timing import timed
from harness.training.train import EpochCallback, evaluate, make_optimizer, prepare, train_epochs, training_metrics
from harness.training.warmup import restored

__all__ = ["PruningConfig", "run"]


def run(cfg: PruningConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    device = prepare(cfg)
    data = load_splits(cfg.dataset, cfg.data_dir, MODELS[cfg.model].input_shape, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)
    model = build_model(cfg.model, data.num_classes).to(device)
    param_count_before = count_parameters(model)
    order = torch.Generator().manual_seed(cfg.seed)
    fit = dict(batch_size=cfg.batch_size, device=device, generator=order)

    pretrain_epochs = cfg.pretrain_epochs if cfg.sparsity > 0 else 0
    pretrain = train_epochs(model, make_optimizer(cfg, model), data.train, epochs=pretrain_epochs, **fit)

    with timed(device) as pruning:
        example = data.train.x[: cfg.batch_size].to(device)
        prune_conv_filters(model, cfg.sparsity, example, cfg.pruning_backend)

    # Per-epoch accuracy (eval_every_epoch, for a study's pruner) and time to a target accuracy, off the clock.
    watch = AccuracyWatch.from_config(
        cfg, lambda: evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=device))
    # The book builds a new optimizer for the pruned model (its parameters are new tensors).
    optimizer = make_optimizer(cfg, model)
    with restored(model, optimizer, order):  # warms the pruned shapes; trains nothing (harness.training.warmup)
        warmup = train_epochs(model, optimizer, data.train, epochs=cfg.warmup_epochs, **fit)
    epoch_times = train_epochs(model, optimizer, data.train, epochs=cfg.epochs, on_epoch=on_epoch, watch=watch, **fit)
    with timed(device) as evaluation:
        accuracy = evaluate(model, data.test, batch_size=cfg.eval_batch_size, device=device)
    samples = watch.checkpoints[-1].samples if watch else len(data.train) * len(epoch_times)
    train = training_metrics(epoch_times, warmup, train_samples=len(data.train), test_samples=len(data.test),
                             accuracy=accuracy, eval_seconds=evaluation.seconds, samples_trained=samples)
    return {
        **train,
        **flop_metrics(flops_per_sample(model, example), samples=samples, train_time_s=train["train_time_s"],
                       device=device),
        **(watch.metrics() if watch else {}),
        "param_count": count_parameters(model),
        "param_count_before": param_count_before,
        "prune_time_s": pruning.seconds,
        "pretrain_epochs_trained": float(len(pretrain)),
        "pretrain_time_s": sum(pretrain),
    }
