"""The probe: a fixed, stratified part of the test set that a fine clock checks every k steps.

Time to accuracy is only as fine as the checks: checked a few times an epoch, every fast recipe
reaches an easy target at the same first check and ties. Checking the whole test set every few steps
costs more wall time than the training it watches (off the clock, but a study has hours, not days),
so the frequent checks read a probe: `size` test images, the same ones in every run of every recipe
(chosen with a fixed generator, not the run's seed), each class in proportion to its share of the
test set, so that the probe's accuracy estimates the whole set's without a class's weight drifting.
A probe reading within two standard errors of the target is confirmed on the whole test set
(time_to_accuracy.AccuracyWatch): only a confirmed check counts, so the probe's noise cannot advance
a crossing, and only a probe that reads more than two standard errors low can delay one.
"""

from __future__ import annotations

import torch

PROBE_SEED = 20_240_401   # fixed: every run, whatever its seed, checks the same images


def stratified_indices(labels: torch.Tensor, size: int) -> torch.Tensor:
    """`size` indices into `labels` (all of them when size >= len), each class's count proportional
    to its share (largest remainders), taken from one fixed permutation; sorted."""
    n = len(labels)
    if size <= 0 or size >= n:
        return torch.arange(n)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(PROBE_SEED))
    classes, counts = torch.unique(labels, return_counts=True)
    exact = counts.double() * size / n
    take = exact.floor().long()
    short = size - int(take.sum())
    take[torch.argsort(exact - take, descending=True)[:short]] += 1
    chosen = []
    shuffled = labels[order]
    for cls, k in zip(classes.tolist(), take.tolist()):
        chosen.append(order[shuffled == cls][:k])
    return torch.cat(chosen).sort().values
