"""Datasets, decoded once into memory as float tensors in [0, 1] (what the book's `ToTensor()` gives).

Each loader returns native-shaped train and test splits; `load_splits` then adapts them to the
model's input (channel count, size) and applies the limits. The in-memory form is what makes the
training loop cheaper than a DataLoader that converts one PIL image at a time: the work inside
the clock is then the model's, not the input pipeline's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from harness import folders
from harness.fields.data_folders import check_class_folders
from harness.errors import UserError, first_line

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"}
GREY28_SIZE = (28, 28)  # Fashion-MNIST's side, for dataset imagefolder_grey28


@dataclass
class Split:
    x: torch.Tensor  # float32, N x C x H x W, values in [0, 1]
    y: torch.Tensor  # int64, N

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Dataset:
    train: Split
    test: Split
    num_classes: int


def _from_uint8_nhwc(images: np.ndarray | torch.Tensor, labels) -> Split:
    x = torch.as_tensor(images)
    if x.ndim == 3:  # N x H x W grey
        x = x.unsqueeze(-1)
    x = x.permute(0, 3, 1, 2).contiguous().float().div_(255.0)
    return Split(x, torch.as_tensor(labels, dtype=torch.int64))


def _torchvision(cls_name: str, how_to_provide: str) -> Callable[[str, int], Dataset]:
    def load(data_dir: str, seed: int) -> Dataset:
        import torchvision

        cls = getattr(torchvision.datasets, cls_name)
        made = _folders_missing(Path(data_dir))
        splits = []
        for train in (True, False):
            try:
                ds = cls(root=data_dir, train=train, download=False)
            except RuntimeError:
                try:
                    ds = cls(root=data_dir, train=train, download=True)
                except Exception as err:  # offline, proxy, disk full: all end the same way for the user
                    _remove_if_empty(made)   # the download made them: nothing is left behind
                    raise UserError(
                        f"{cls_name} is not in '{data_dir}' and could not be downloaded "
                        f"({type(err).__name__}); {how_to_provide}"
                    ) from None
            splits.append(_from_uint8_nhwc(np.asarray(ds.data), ds.targets))
        return Dataset(splits[0], splits[1], 10)

    return load


def _folders_missing(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_if_empty(made: list[Path]) -> None:
    """Remove what a failed download made of `made` (deepest first) and left empty, with the empty
    folders it made inside them."""
    for folder in made:
        for inner, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(inner)   # only an empty folder goes


def _imagefolder(data_dir: str, seed: int, grey28: bool = False) -> Dataset:
    root = Path(data_dir)
    check_class_folders("imagefolder_grey28" if grey28 else "imagefolder", data_dir)
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if len(classes) < 2:
        raise UserError(f"'{root}/train' has {len(classes) or 'no'} class folder{'' if len(classes) == 1 else 's'}"
                        f"{' (' + classes[0] + ')' if classes else ''}; a classifier needs at least two: put each "
                        "class's images in train/<class>/.")
    extra = sorted(p.name for p in (root / "test").iterdir() if p.is_dir() and p.name not in classes)
    if extra:
        raise UserError(f"'{root}/test' has class folder '{extra[0]}', which '{root}/train' lacks; "
                        "the test classes must be the training classes.")
    train, test = _decode_folder(root / "train", classes, grey28), _decode_folder(root / "test", classes, grey28)
    for split, folder in ((train, "train"), (test, "test")):
        absent = [c for i, c in enumerate(classes) if not (split.y == i).any()]
        if absent:  # a class never tested makes the accuracy a figure about the other classes
            raise UserError(f"'{root}/{folder}' has no images of class '{absent[0]}'; every class needs "
                            f"images in both train/ and test/.")
    return Dataset(train, test, len(classes))


def _imagefolder_grey28(data_dir: str, seed: int) -> Dataset:
    """The image folder in grey at 28x28: the stand-in for Fashion-MNIST (28x28 grey) where a table
    trained on it and only CIFAR-10's JPEGs are here (D12.5, D12.6 at the cpu scale).

    Why not let `_adapt` do it from the RGB tensors: its channel mean and plain bilinear resize are a
    model-input adapter; this is a dataset, converted as one would prepare it (PIL's ITU-R 601 luma,
    then an antialiased bilinear resize), decoded once and cached at a quarter of the RGB size, so
    every DDP rank holds 28x28 grey floats, not 32x32 RGB ones."""
    return _imagefolder(data_dir, seed, grey28=True)


def _grey28(img) -> np.ndarray:
    from PIL import Image

    return np.asarray(img.convert("L").resize(GREY28_SIZE, Image.Resampling.BILINEAR))


def _decode_folder(folder: Path, classes: list[str], grey28: bool = False) -> Split:
    files = [(f, label) for label, c in enumerate(classes) for f in sorted((folder / c).glob("*"))
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise UserError(f"'{folder}' holds no images in its class folders ({', '.join(classes)}).")
    kind = "imagefolder-grey28" if grey28 else "imagefolder"
    cache = folders.CACHE_DIR / f"{kind}-{folder_key(folder, [f for f, _ in files])}.pt"
    saved = _read_cache(cache, len(files))
    if saved is not None:
        return _from_uint8_nhwc(saved["x"], saved["y"])

    from PIL import Image
    from tqdm import tqdm

    arrays = []
    for f, _ in tqdm(files, desc=f"decoding {folder.name}", unit="img", leave=False, mininterval=1.0):
        try:
            with Image.open(f) as img:
                arrays.append(_grey28(img) if grey28 else np.asarray(img.convert("RGB")))
        except (OSError, SyntaxError, Image.DecompressionBombError) as err:
            # not an image, truncated, a format PIL misreads, or one so large PIL refuses to decode it
            raise UserError(f"'{f}' is not an image that can be read ({first_line(err)}); remove or "
                            "replace it.") from None
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise UserError(f"images in '{folder}' differ in size ({sorted(shapes)[:2]}); resize them to one size first.")
    x = np.stack(arrays)
    y = np.array([label for _, label in files])
    _write_cache(cache, {"x": torch.from_numpy(x), "y": torch.from_numpy(y)})
    return _from_uint8_nhwc(x, y)


def folder_key(folder: Path, files: list[Path]) -> str:
    """What a decoded folder's cache is keyed by: every image's path under the folder (its class
    folder is its label), size and modification time, sorted. A file added, removed, edited or
    moved between class folders changes it."""
    listing = sorted((str(f.relative_to(folder)), *_size_and_mtime(f)) for f in files)
    return hashlib.sha256(repr(listing).encode()).hexdigest()[:24]


def _size_and_mtime(image: Path) -> tuple[int, int]:
    """A listed image that cannot be looked at (a symlink to nothing, a file removed while the
    folder is read, one this user may not see) is the user's folder to fix, not a machine fault."""
    try:
        found = image.stat()
    except OSError as err:
        reason = "a link to nothing" if image.is_symlink() else err.strerror
        raise UserError(f"'{image}' cannot be read ({reason}); remove or replace it.") from None
    return found.st_size, found.st_mtime_ns


def _read_cache(path: Path, count: int) -> dict | None:
    """The cached tensors, or None when there are none or they cannot be read whole (a file cut
    short by a full disk or a kill before writes were atomic): the folder is decoded again."""
    if not path.exists():
        return None
    try:
        saved = torch.load(path)
        if len(saved["x"]) == len(saved["y"]) == count:
            return saved
    except Exception:  # torch raises RuntimeError, EOFError, pickle's errors... for a damaged file
        pass
    path.unlink(missing_ok=True)
    return None


def _write_cache(path: Path, tensors: dict) -> None:
    """Written beside its place and renamed into it, so a reader finds the whole file or none. A
    cache that cannot be written (a full disk) is no error: the decoded images are in memory."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(tensors, temporary)
        os.replace(temporary, path)
    except (OSError, RuntimeError):  # torch.save reports a failed write as RuntimeError
        temporary.unlink(missing_ok=True)


def _digits(data_dir: str, seed: int) -> Dataset:
    """scikit-learn's bundled 8x8 digits (1,797 real scans), split 80/20 by a fixed permutation."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(0.8 * len(y))
    return Dataset(Split(x[order[:cut]], y[order[:cut]]), Split(x[order[cut:]], y[order[cut:]]), 10)


def synthetic(shape: tuple[int, int, int], train_size: int, test_size: int, seed: int,
              num_classes: int = 10) -> Dataset:
    """Learnable images: each class is a smooth random prototype, each sample that prototype plus
    noise. Seeded, so the same seed gives the same data."""
    g = torch.Generator().manual_seed(seed)
    c, h, w = shape
    coarse = torch.rand(num_classes, c, max(h // 4, 1), max(w // 4, 1), generator=g)
    prototypes = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)

    def draw(n: int) -> Split:
        y = torch.randint(0, num_classes, (n,), generator=g)
        x = (prototypes[y] + 0.35 * torch.randn(n, c, h, w, generator=g)).clamp_(0, 1)
        return Split(x, y)

    return Dataset(draw(train_size), draw(test_size), num_classes)


# Each dataset's loader, under its name in harness/fields/catalogue.py's DATASETS (read without torch).
DATASETS: dict[str, Callable[[str, int], Dataset] | None] = {
    "cifar10": _torchvision(
        "CIFAR10",
        "connect once to download it, copy cifar-10-batches-py into data_dir, or use "
        "dataset=imagefolder with data_dir holding train/ and test/ class folders.",
    ),
    "fashion_mnist": _torchvision(
        "FashionMNIST", "connect once to download it, or copy the FashionMNIST/raw files into data_dir."
    ),
    "imagefolder": _imagefolder,
    "imagefolder_grey28": _imagefolder_grey28,
    "digits": _digits,
    "synthetic": None,  # built from the model's input shape, see load_splits
}

SYNTHETIC_DEFAULT_SIZES = (2048, 512)
_memory: dict[tuple, Dataset] = {}


def load_splits(name: str, data_dir: str, input_shape: tuple[int, int, int], *, seed: int = 0,
                train_limit: int = 0, test_limit: int = 0) -> Dataset:
    """The dataset adapted to `input_shape`, limited to fixed random subsets when limits are set.

    Decoded data are kept in memory for the life of the process, so a sweep decodes once.
    """
    key = (name, str(Path(data_dir).resolve()), input_shape, seed if name == "synthetic" else None,
           train_limit, test_limit)
    if key in _memory:
        return _memory[key]
    if name == "synthetic":
        data = synthetic(input_shape, train_limit or SYNTHETIC_DEFAULT_SIZES[0],
                         test_limit or SYNTHETIC_DEFAULT_SIZES[1], seed)
    else:
        data = DATASETS[name](data_dir, seed)
        data = Dataset(_limit(_adapt(data.train, input_shape), train_limit),
                       _limit(_adapt(data.test, input_shape), test_limit), data.num_classes)
    _memory.clear()  # hold one dataset at a time: CIFAR-10 alone is 700 MB as float32
    _memory[key] = data
    return data


def _adapt(split: Split, shape: tuple[int, int, int]) -> Split:
    c, h, w = shape
    x = split.x
    if x.shape[1] != c:
        if c == 1:
            x = x.mean(dim=1, keepdim=True)
        elif x.shape[1] == 1:
            x = x.expand(-1, c, -1, -1)
        else:
            raise UserError(f"cannot adapt {x.shape[1]}-channel images to a {c}-channel model.")
    if tuple(x.shape[2:]) != (h, w):
        x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
    return Split(x.contiguous(), split.y)


def _limit(split: Split, limit: int) -> Split:
    if not limit or limit >= len(split):
        return split
    # A fixed permutation, not the first N: class-folder data are ordered by class.
    keep = torch.randperm(len(split), generator=torch.Generator().manual_seed(0))[:limit]
    return Split(split.x[keep], split.y[keep])


def batches(split: Split, batch_size: int, generator: torch.Generator | None = None,
            shuffle: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Mini-batches in a fresh random order each call (like DataLoader(shuffle=True), last batch kept)."""
    n = len(split)
    if not shuffle:
        for start in range(0, n, batch_size):
            yield split.x[start:start + batch_size], split.y[start:start + batch_size]
        return
    for idx in shuffled_indices(n, batch_size, generator):
        yield split.x[idx], split.y[idx]


def shuffled_indices(n: int, batch_size: int, generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """The sample indices of each mini-batch, in a fresh random order each call (last batch kept)."""
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size]


class DeviceBatches:
    """Gathers mini-batches from the in-memory tensors and copies them to `device`.

    Why pinned buffers: `split.x[idx]` is a fresh pageable tensor, and CUDA copies from pageable
    memory synchronously whatever `non_blocking` says (the host waits until the GPU has taken the
    data), so the CPU could never queue the next step while the GPU computes. On CUDA each batch is
    therefore gathered (`torch.index_select(..., out=)`) into a page-locked host buffer and copied
    with `non_blocking=True`, which returns at once. Two buffers take turns; a CUDA event recorded
    after each copy is waited on before its buffer is overwritten, so a copy still queued never
    reads the next batch. Elsewhere (CPU) a batch is the indexed tensors, as before.

    `staged=True` uses the buffers on any device (unpinned off CUDA): the tests' way to check the
    gather on a machine without a GPU.
    """

    SLOTS = 2

    def __init__(self, device: torch.device, staged: bool | None = None):
        self.device = torch.device(device)
        self.staged = self.device.type == "cuda" if staged is None else staged
        self._pin = self.device.type == "cuda"
        self._buffers: list[dict[str, torch.Tensor]] = [{} for _ in range(self.SLOTS)]
        self._copied: list[torch.cuda.Event | None] = [None] * self.SLOTS
        self._turn = 0

    def __call__(self, split: Split, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.staged:
            return (split.x[idx].to(self.device, non_blocking=True),
                    split.y[idx].to(self.device, non_blocking=True))
        slot = self._turn
        self._turn = (slot + 1) % self.SLOTS
        if self._copied[slot] is not None:
            self._copied[slot].synchronize()  # this buffer's previous copy has left the host
        x = self._gather(slot, "x", split.x, idx)
        y = self._gather(slot, "y", split.y, idx)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            self._copied[slot] = torch.cuda.Event()
            self._copied[slot].record(torch.cuda.current_stream(self.device))
        return x, y

    def _gather(self, slot: int, name: str, source: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        buffer = self._buffers[slot].get(name)
        if buffer is None or len(buffer) < len(idx) or buffer.shape[1:] != source.shape[1:] \
                or buffer.dtype != source.dtype:
            buffer = torch.empty((len(idx), *source.shape[1:]), dtype=source.dtype, pin_memory=self._pin)
            self._buffers[slot][name] = buffer
        out = buffer[:len(idx)]  # the last batch of an epoch may be shorter
        torch.index_select(source, 0, idx, out=out)
        return out
