"""What a training cell trained on, for MLflow's dataset record (the UI's Dataset column): a name,
a digest that changes when the data do, where the data came from, and the split sizes.

The digest of data read from a folder (image class folders, torchvision's files) is taken over the
sorted (relative path, size, mtime) list of its files: reading every image again per cell would cost
more than the cell. Data made in memory (synthetic, scikit-learn's digits) are hashed themselves.
Either way the subset (limits, seed for generated data) and the model's input shape are part of it:
two cells that saw different tensors never share a digest. Computed once per process per dataset.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

FOLDER_DATASETS = {"imagefolder", "imagefolder_grey28", "cifar10", "fashion_mnist"}


@dataclass(frozen=True)
class DatasetRecord:
    name: str          # "imagefolder (cifar10-jpeg)", "synthetic", "digits"
    digest: str        # 16 hex digits
    source: str        # the resolved folder, or the loader that generated the data
    source_is_path: bool
    train_samples: int
    test_samples: int

    def profile(self) -> dict[str, int]:
        return {"train_samples": self.train_samples, "test_samples": self.test_samples}


def describe(cfg, shape: tuple[int, int, int] | None = None) -> DatasetRecord:
    """The record of the data `cfg` trains on (loaded through the same cached load_splits as the cell),
    at `shape` (default: its model's input shape)."""
    from harness.training.models import MODELS

    shape = shape or MODELS[cfg.model].input_shape
    return _describe(cfg.dataset, str(Path(cfg.data_dir).resolve()), shape,
                     cfg.seed if cfg.dataset == "synthetic" else 0, cfg.train_limit, cfg.test_limit)


@functools.lru_cache(maxsize=16)
def _describe(dataset: str, data_dir: str, shape: tuple[int, int, int], seed: int,
              train_limit: int, test_limit: int) -> DatasetRecord:
    from harness.training.data import load_splits

    data = load_splits(dataset, data_dir, shape, seed=seed, train_limit=train_limit, test_limit=test_limit)
    digest = hashlib.sha256(f"{dataset}|{shape}|{seed}|{train_limit}|{test_limit}|".encode())
    if dataset in FOLDER_DATASETS:
        _hash_listing(digest, Path(data_dir))
        name, source, is_path = f"{dataset} ({Path(data_dir).name})", data_dir, True
    else:
        for tensor in (data.train.x, data.train.y, data.test.x, data.test.y):
            digest.update(tensor.contiguous().numpy().tobytes())
        name, source, is_path = dataset, f"harness.training.data ({dataset}, generated in memory)", False
    return DatasetRecord(name, digest.hexdigest()[:16], source, is_path, len(data.train), len(data.test))


def _hash_listing(digest, root: Path) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
