"""Model registry: every model the experiments can name, with the input it expects.

Add a model by writing a builder, one line in BUILDERS, and one `ModelInfo` line under the same name in
harness/fields/catalogue.py's MODELS (what it expects and which weights it has, read without torch).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import CellSkipped, UserError, first_line
from harness.fields.catalogue import MODELS, models_with_weights


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


class D2lMLP(nn.Sequential):
    """d2l 12.1's net: Linear(512, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 2)."""

    def __init__(self, num_classes: int = 2):
        super().__init__(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, num_classes))


class Residual(nn.Module):
    """d2l's residual block: two 3x3 convs with batch norm, optional 1x1 shortcut conv."""

    def __init__(self, in_channels: int, channels: int, use_1x1conv: bool = False, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv3 = nn.Conv2d(in_channels, channels, 1, stride=stride) if use_1x1conv else None
        self.bn1, self.bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)

    def forward(self, x):
        y = self.bn2(self.conv2(nn.functional.relu(self.bn1(self.conv1(x)))))
        return nn.functional.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet18_d2l(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """d2l 12.6's ResNet-18 for small images: 3x3 stem, no max-pool, four stages of two blocks,
    Linear and Conv2d weights initialised normal(std=0.01) as in the notes."""

    def stage(cin, cout, first):
        return nn.Sequential(Residual(cin, cout, use_1x1conv=not first, stride=1 if first else 2),
                             Residual(cout, cout))

    net = nn.Sequential(
        nn.Sequential(nn.Conv2d(in_channels, 64, 3, stride=1, padding=1), nn.BatchNorm2d(64), nn.ReLU()),
        stage(64, 64, True), stage(64, 128, False), stage(128, 256, False), stage(256, 512, False),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(512, num_classes),
    )
    for m in net.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.normal_(m.weight, std=0.01)
    return net


def get_lenet_params(seed: int, num_classes: int = 10) -> list[torch.Tensor]:
    """d2l's LeNet parameters as plain tensors (scale 0.01, zero biases)."""
    g = torch.Generator().manual_seed(seed)
    scale = 0.01
    shapes = [(20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,), (800, 128), (128,), (128, num_classes), (num_classes,)]
    return [torch.randn(s, generator=g) * scale if len(s) > 1 else torch.zeros(s) for s in shapes]


def lenet(x: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    h1 = F.avg_pool2d(F.relu(F.conv2d(x, params[0], params[1])), kernel_size=2, stride=2)
    h2 = F.avg_pool2d(F.relu(F.conv2d(h1, params[2], params[3])), kernel_size=2, stride=2)
    h3 = F.relu(h2.reshape(h2.shape[0], -1) @ params[4] + params[5])
    return h3 @ params[6] + params[7]


class TensorLeNet(nn.Module):
    """d2l 12.5's plain-tensor LeNet as a module (so DDP can wrap it); forward is `lenet`."""

    def __init__(self, params: list[torch.Tensor]):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p.clone()) for p in params])

    def forward(self, x):
        return lenet(x, list(self.params))


def _torchvision(name: str) -> Callable[..., nn.Module]:
    """torchvision's model of that name: random weights, or `weights` (a torchvision weights entry)."""
    def build(num_classes: int = 10, weights=None) -> nn.Module:
        import torchvision

        return getattr(torchvision.models, name)(weights=weights, num_classes=num_classes)
    return build


# Each model's builder: the number of outputs -> the module. What it expects and which weights it can
# start from are its line in harness/fields/catalogue.py's MODELS (read without torch), under the same name.
BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "cnn": BookCNN,
    "tiny_cnn": TinyCNN,
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "efficientnet_b7": _torchvision("efficientnet_b7"),
    "resnet18_d2l": resnet18_d2l,
    "lenet_d2l": lambda num_classes=10: TensorLeNet(get_lenet_params(0, num_classes)),
    "mlp_d2l": D2lMLP,
}


def build_model(name: str, num_classes: int = 10, pretrained: bool = False) -> nn.Module:
    """The model with one output per class, or its fixed head (`head_classes`); with `pretrained`,
    its published weights, which must already be in the torch hub cache (`fetch_weights`)."""
    outputs = MODELS[name].head_classes or num_classes
    if not pretrained:
        return BUILDERS[name](outputs)
    # The registry's own builder with the weights: torchvision loads them strictly (every tensor,
    # its shape) and checks the file's hash.
    return BUILDERS[name](outputs, weights=pretrained_weights(name))


def pretrained_weights(name: str):
    """The torchvision weights entry the model's `weights` names (EfficientNet_B7_Weights.DEFAULT)."""
    import torchvision

    spec = MODELS[name]
    if spec.weights is None:
        raise UserError(f"model '{name}' has no published weights to start from; set pretrained=false "
                        f"(models with weights: {', '.join(models_with_weights())}).")
    enum, _, member = spec.weights.partition(".")
    return getattr(getattr(torchvision.models, enum), member)


def weights_path(name: str) -> Path:
    """Where torch keeps the model's weights file once fetched: the hub cache's checkpoints folder."""
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(pretrained_weights(name).url).path).name


def fetch_weights(name: str, timeout_s: float = 60.0) -> Path:
    """The cached weights file of `name`, downloaded first when it is not in the torch hub cache.
    CellSkipped, with the reason, when it cannot be had: a cell asked for ImageNet weights must not
    train from random ones. Call it in the sweep's process before ranks start, so one process downloads."""
    path = weights_path(name)
    if path.is_file():
        return path
    url = pretrained_weights(name).url
    path.parent.mkdir(parents=True, exist_ok=True)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)  # urllib waits for ever on a network that drops packets
    try:
        # The file name carries the start of its sha256 (torch.hub's convention): a damaged download is
        # refused here rather than failing every rank that loads it.
        match = torch.hub.HASH_REGEX.search(path.name)
        torch.hub.download_url_to_file(url, str(path), hash_prefix=match.group(1) if match else None, progress=False)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a bad hash is a RuntimeError
        raise CellSkipped(f"{MODELS[name].weights} for {name} is not in the torch hub cache ({path}) and "
                          f"cannot be fetched from {url} ({first_line(err)}); put the file there to run this "
                          "cell (it would otherwise train from random weights)") from None
    finally:
        socket.setdefaulttimeout(before)
    return path


def count_parameters(model: nn.Module) -> int:
    """As in the book: every parameter, trainable or not."""
    return sum(p.numel() for p in model.parameters())
