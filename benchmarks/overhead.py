"""make bench-overhead: what the harness costs, measured side by side in one process.

1. Overhead: the same training workload (the book's CNN, CIFAR-10-shaped synthetic data, Adam,
   batch 64, test-set evaluation) run bare (a plain loop, one clock around it) and through the
   harness (`run_sweep` of a one-cell sweep into a fresh SQLite MLflow store: reaping, lookups,
   parent and child runs, params, per-epoch metrics, config artifact). Alternated, median ratio.
   Goal: harness / bare <= 1.03.
2. Training loop: the book's notebook loop (DataLoader over a dataset that turns each uint8
   image into a tensor with ToTensor(), as torchvision's CIFAR10 does) against the harness's
   in-memory loop, same model, threads and batch, one epoch each, alternated.
   Goal: notebook / harness >= 1.0.
3. System metrics: the same one-cell sweep with MLflow's system-metrics sampler on and off
   (`harness sweep --system-metrics`), alternated: the cell's own train_time_s (inside the clock:
   does the sampling thread slow training?) and the invocation's wall seconds.
   Goal: on / off <= 1.02 for train_time_s.

    make bench-overhead [ARGS="--rounds 5 --train 4096 --epochs 2"]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from experiments import make_config
from harness.cells import SYSTEM_METRICS_INTERVAL_S
from harness.training.data import batches, load_splits
from harness.machine.hardware import usable_core_count
from harness.training.models import build_model
from harness.sweeps.sweep_engine import run_sweep
from harness.specs.sweep_spec import SweepSpec
from harness.training.timing import spread
from harness.store import Store
from harness.training.train import make_optimizer, train_epochs

BASE = {"model": "cnn", "dataset": "synthetic", "warmup_epochs": 0, "batch_size": 64, "lr": 1e-5,
        "weight_decay": 0.005, "optimizer": "adam"}


def bare_run(cfg, data) -> float:
    """The workload with no harness around it: build, train, evaluate. Returns wall seconds."""
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = build_model("cnn")
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.epochs):
        for x, y in batches(data.train, cfg.batch_size, order):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in batches(data.test, 1000, shuffle=False))
    assert correct >= 0
    return time.perf_counter() - start


def harness_run(spec: SweepSpec, store: Store, repeat: int) -> float:
    """A new cell each round through its repeat index: same seed, so the same (cached) data and
    initial weights as the bare run; a new seed would also regenerate the synthetic data."""
    return timed_cell(spec, store, repeat)[0]


def timed_cell(spec: SweepSpec, store: Store, repeat: int) -> tuple[float, float]:
    """(wall seconds of the invocation, the cell's own train_time_s)."""
    start = time.perf_counter()
    result = run_sweep(spec, store, overrides={"repeat": repeat}, show_progress=False)
    assert result.results[0].outcome == "ok", result.results[0].reason
    return time.perf_counter() - start, result.results[0].metrics["train_time_s"]


def system_metrics_arm(spec: SweepSpec, store: Store, rounds: int) -> None:
    """The cell with MLflow's system metrics sampled and without, alternated (distinct repeat
    indices: the sampler is not part of a cell's identity, so the same cell would be reused)."""
    on_spec, off_spec = spec.model_copy(update={"system_metrics": True}), spec.model_copy(update={"system_metrics": False})
    on, off = [], []
    for r in range(rounds):
        pair = [(off, lambda: timed_cell(off_spec, store, 20_000 + r)), (on, lambda: timed_cell(on_spec, store, 30_000 + r))]
        for into, fn in (pair if r % 2 == 0 else pair[::-1]):
            into.append(fn())
    _print("cell train_time_s, system metrics off", [t for _, t in off])
    _print("cell train_time_s, system metrics on", [t for _, t in on])
    _print("system metrics ratio on/off (train_time_s)", [a[1] / b[1] for a, b in zip(on, off)], goal="goal <= 1.02")
    _print("system metrics ratio on/off (wall)", [a[0] / b[0] for a, b in zip(on, off)],
           goal=f"sampled every {SYSTEM_METRICS_INTERVAL_S:g} s")


class NotebookCIFAR(torch.utils.data.Dataset):
    """torchvision.datasets.CIFAR10's __getitem__: uint8 HWC array -> PIL image -> ToTensor()."""

    def __init__(self, images: np.ndarray, labels: list[int]):
        from torchvision import transforms

        self.images, self.labels, self.transform = images, labels, transforms.ToTensor()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.images[i])), self.labels[i]


def notebook_epoch(model, optimizer, loader) -> float:
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for images, labels in loader:
        optimizer.zero_grad()
        loss_fn(model(images), labels).backward()
        optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--train", type=int, default=4096, help="training samples per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    threads = usable_core_count()
    torch.set_num_threads(threads)
    values = {**BASE, "train_limit": args.train, "test_limit": 1000, "epochs": args.epochs, "threads": threads}
    cfg = make_config(values)
    data = load_splits("synthetic", "", (3, 32, 32), seed=0, train_limit=args.train, test_limit=1000)
    print(f"workload: book CNN, {args.train} CIFAR-shaped samples x {args.epochs} epochs, batch 64, "
          f"{threads} threads, CPU; {args.rounds} alternating rounds")

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        spec = SweepSpec(name="bench_overhead", title="overhead", experiment="pruning", base=values,
                         grid={"sparsity": [0.0]}, scales={"full": {}})
        bare_run(cfg, data), harness_run(spec, store, repeat=10_000)  # warm-up: allocator, store schema
        bare, wrapped = [], []
        for r in range(args.rounds):
            pair = [("bare", lambda: bare_run(cfg, data)), ("harness", lambda: harness_run(spec, store, repeat=r))]
            for name, fn in (pair if r % 2 == 0 else pair[::-1]):
                (bare if name == "bare" else wrapped).append(fn())
        system_metrics_arm(spec, store, args.rounds)
    ratios = [w / b for w, b in zip(wrapped, bare)]
    _print("bare run (s)", bare)
    _print("through the harness (s)", wrapped)
    _print("overhead ratio harness/bare", ratios, goal="goal <= 1.03")

    images = (data.train.x.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy()
    loader = torch.utils.data.DataLoader(NotebookCIFAR(images, data.train.y.tolist()), batch_size=64, shuffle=True)
    model = build_model("cnn")
    optimizer = make_optimizer(cfg, model)
    notebook_epoch(model, optimizer, loader)  # warm-up
    notebook, ours = [], []
    for r in range(args.rounds):
        notebook.append(notebook_epoch(model, optimizer, loader))
        ours.extend(train_epochs(model, optimizer, data.train, epochs=1, batch_size=64,
                                 device=torch.device("cpu"), generator=torch.Generator().manual_seed(r)))
    _print("notebook DataLoader+ToTensor epoch (s)", notebook)
    _print("harness in-memory epoch (s)", ours)
    _print("loop ratio notebook/harness", [n / o for n, o in zip(notebook, ours)], goal="goal >= 1.0")


def _print(label: str, values: list[float], goal: str = "") -> None:
    s = spread(values)
    print(f"{label:<42} median {s['median']:.4f}  IQR {s['iqr']:.4f}  "
          f"[{s['min']:.4f} .. {s['max']:.4f}]  n={len(values)}  {goal}")


if __name__ == "__main__":
    main()
