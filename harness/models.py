"""Model registry: every model the experiments can name, with the input it expects.

Add a model by writing a builder and one `ModelSpec` line in MODELS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn


class BookCNN(nn.Module):
    """The book's CNN (SPEC: 2,122,186 parameters for 10 classes). No activation between fc1 and fc2,
    as in the book."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(3, 32, 3, stride=1, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.layer2 = nn.Sequential(nn.Conv2d(32, 64, 3, stride=1, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.fc1 = nn.Linear(64 * 8 * 8, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(x))
        # reshape (not view) keeps the traced graph valid once speed-up shrinks the channels.
        x = x.reshape(x.size(0), -1)
        return self.fc2(self.fc1(x))


class TinyCNN(nn.Module):
    """A few-thousand-parameter stand-in with the CNN's structure, for fast tests."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.layer2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(x))
        return self.fc2(self.fc1(x.reshape(x.size(0), -1)))


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[int], nn.Module]
    input_shape: tuple[int, int, int]  # channels, height, width the model expects
    description: str


MODELS: dict[str, ModelSpec] = {
    "cnn": ModelSpec(BookCNN, (3, 32, 32), "The book's CNN for CIFAR-10 (2,122,186 parameters)."),
    "tiny_cnn": ModelSpec(TinyCNN, (1, 16, 16), "A tiny CNN with the same layer names, for tests."),
}


def build_model(name: str, num_classes: int = 10) -> nn.Module:
    return MODELS[name].build(num_classes)


def count_parameters(model: nn.Module) -> int:
    """As in the book: every parameter, trainable or not."""
    return sum(p.numel() for p in model.parameters())
