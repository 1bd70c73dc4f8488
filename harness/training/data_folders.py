"""The part of a dataset's check that needs no decoding: an image-folder dataset's train/ and test/
folders exist. The command line asks it of every cell before torch is loaded, and data.py
asks it again before it decodes a folder."""

from __future__ import annotations

from pathlib import Path

from harness.training.catalogue import IMAGE_FOLDER_DATASETS
from harness.errors import UserError
from harness.suggest import shown_path


def check_class_folders(dataset: str, data_dir: str) -> None:
    """UserError naming the missing folder when `dataset` reads class folders and `data_dir` lacks
    its train/ or test/; other datasets are downloaded or made, and are not checked here."""
    if dataset not in IMAGE_FOLDER_DATASETS:
        return
    root = Path(data_dir)
    missing = [d for d in ("train", "test") if not (root / d).is_dir()]
    if missing:
        raise UserError(
            f"dataset '{dataset}' needs class folders under '{root}/train' and '{root}/test' "
            f"('{root}/{missing[0]}' is missing); set data_dir to such a folder (data_dir: {shown_path(root)})."
        )
