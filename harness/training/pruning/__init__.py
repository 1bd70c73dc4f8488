"""Structured L1-norm pruning of Conv2d filters, physically removing them (T6.1).

Two backends take the same arguments and give the same architecture:
- `nni`: the book's tool. L1NormPruner makes masks, ModelSpeedup traces the model and removes the
  masked filters and what they feed (the next conv's input channels, fc1's input columns).
- `torch-pruning`: DepGraph finds the same dependencies; the L1 norm of each conv's own filters
  ranks them, as in NNI, so both keep the same filters.
Linear layers keep their outputs (the book prunes only Conv2d), so fc1 shrinks on its input side.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings

import torch
from torch import nn

BACKENDS = ("nni", "torch-pruning")


def prune_conv_filters(model: nn.Module, sparsity: float, example_input: torch.Tensor,
                       backend: str = "nni") -> nn.Module:
    """Remove `sparsity` of every Conv2d's filters by L1 norm; returns the (same, modified) model."""
    if sparsity <= 0:
        return model
    if backend == "nni":
        return _prune_nni(model, sparsity, example_input)
    if backend == "torch-pruning":
        return _prune_torch_pruning(model, sparsity, example_input)
    raise ValueError(f"unknown pruning backend '{backend}'; choose one of {', '.join(BACKENDS)}")


def _prune_nni(model: nn.Module, sparsity: float, example_input: torch.Tensor) -> nn.Module:
    from harness.training.pruning import nni_compat

    with warnings.catch_warnings():
        # NNI 3.0 uses torch's private pytree API, which warns on import; nothing to act on.
        warnings.simplefilter("ignore")
        nni_compat.apply()
        from nni.compression.pruning import L1NormPruner
        from nni.compression.speedup import ModelSpeedup

    # NNI logs a line per traced node, and a warning per conv whose input and output are both
    # masked (expected here: layer2 loses filters and the input channels of layer1's pruned ones).
    quiet = logging.getLogger("nni")
    level, quiet.level = quiet.level, logging.ERROR
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            pruner = L1NormPruner(model, [{"op_types": ["Conv2d"], "sparse_ratio": sparsity}])
            _, masks = pruner.compress()
            pruner.unwrap_model()
            ModelSpeedup(model, example_input, masks, logger=quiet).speedup_model()
    finally:
        quiet.level = level
    return model


def _prune_torch_pruning(model: nn.Module, sparsity: float, example_input: torch.Tensor) -> nn.Module:
    import torch_pruning as tp

    # NNI removes floor(n * sparsity) of a layer's n filters; torch-pruning keeps int(n * (1 - ratio)),
    # which differs by one filter at some ratios (32 * 0.9 = 28.8). Per-layer ratios nudged below
    # the exact fraction make both backends build the same architecture.
    ratios = {
        m: math.floor(m.out_channels * sparsity) / m.out_channels - 1e-9
        for m in model.modules() if isinstance(m, nn.Conv2d)
    }
    pruner = tp.pruner.BasePruner(
        model,
        example_input,
        # L1 norm of the pruned conv's own filters, as NNI's L1NormPruner ranks them; torch-pruning's
        # default would also weigh the next layer's input channels (group importance).
        importance=tp.importance.MagnitudeImportance(p=1, normalizer=None, group_reduction="first"),
        pruning_ratio_dict=ratios,
        ignored_layers=[m for m in model.modules() if isinstance(m, nn.Linear)],
    )
    pruner.step()
    return model
