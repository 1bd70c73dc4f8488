"""airbench94: the fastest published CIFAR-10 training to 94% (Keller Jordan, "94% on CIFAR-10 in 3.29
seconds on a single GPU", arXiv 2404.00498), and the paper's ablation ladder of it, as one experiment.

    harness run airbench --set dataset=digits --set epochs=2 --set batch_size=128 --set airbench_base_width=8
    harness sweep airbench --scale cpu --set data_dir=/work/shared/data/cifar10-jpeg

Written here from the paper and from reading github.com/KellerJordan/cifar10-airbench
(legacy/airbench94.py) and the ablation scripts of github.com/KellerJordan/cifar10-zoo
(airbench/ablations/main0..main7); no code is copied. The recipe:

- network: a 2x2 conv of 24 filters (no padding) and GELU, three groups of conv-pool-BN-GELU,
  conv-BN-GELU (widths w, 4w, 4w; w = 64), a 3x3 max-pool, a linear head without bias scaled by 1/9;
  BatchNorm with eps 1e-12, no trained weight (only the bias), running averages keeping 0.6 of the
  old value (0.9 before the lookahead rung);
- the first conv frozen as a patch whitening: the eigenvectors of the 2x2 patches' second-moment
  matrix (5,000 training images), scaled by 1/sqrt(eigenvalue + 5e-4), and their negatives; its bias
  trains for the first 3 epochs only; every other conv starts as a (partial) identity (dirac);
- Nesterov SGD, momentum 0.85, batch 1024, label smoothing 0.2, the loss summed over the batch; lr
  11.5 and weight decay 0.0153 "per 1024 examples", decoupled from the momentum (the step is divided by
  1024 (1 + 1/(1 - momentum))); BatchNorm biases at 64x the lr, not the decay; lr from 0.2x up to 1x
  over the first 23% of the steps, then down to 0.07x; lookahead: every 5 steps the weights (and the
  BatchNorm statistics) are pulled to their moving average, whose decay rises as 0.95^5 (t/T)^3;
- data: the whole training set as one tensor, normalised, padded by 2 (reflect) once; each batch is
  translated by up to 2 pixels and flipped on the fly; alternating flip: a random half of the images
  is flipped in even epochs, the other half in odd ones;
- test-time augmentation: the mean of the logits over the mirror (level 1), and over the mirror of
  the image and of its one-pixel translations up-left and down-right (level 2: six views).

The rungs (`airbench_rung`) switch these on in the ablation scripts' order (RUNGS below). Where this
differs from the published script: weights stay fp32 under autocast (the script keeps fp16 weights,
BatchNorm fp32), in bf16 on a CPU; the statistics of the normalisation are the training set's own.

The fields: `airbench_rung` picks a rung, `airbench_epochs` the fractional epochs (9.9, with `epochs`
its ceiling), `airbench_base_width` the widths. What a small CPU may want otherwise (the CPU study's
space, sweeps/study_airbench_cpu.toml), each the published value by default: `airbench_tta_level`,
`airbench_whiten_kernel` (the whitening patch's side), `airbench_lr_scale` and `airbench_wd_scale`
(multiplying the lr and weight decay per 1,024 examples), `airbench_fp32_layers` (the whitening conv
and/or the head in fp32 under autocast). A cell logs the time to 94% (`time_to_accuracy_s`),
the accuracy with and without test-time augmentation (`test_accuracy`, `test_accuracy_no_tta`), the
whitening's own time (`whiten_time_s`), FLOPs and MFU.

The clock (CLOCK) holds what the paper's timer holds, less the final evaluation: the whitening
initialisation and every training step with its augmentation; evaluations, the test-time
augmentation included, are off the clock as everywhere in the harness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from experiments.descriptors.airbench import AirbenchConfig, INPUT_SHAPE
from harness.training import accuracy_probe, flops, speed_methods
from harness.fields.config import RunConfig
from harness.training.data import load_splits
from harness.errors import CellSkipped
from harness.training.precision import Precision, backend_flags
from harness.training.time_to_accuracy import AccuracyWatch
from harness.training.timing import timed
from harness.training.train import EpochCallback, prepare

__all__ = ["AirbenchConfig", "RUNGS", "run"]

WHITEN_KERNEL = 2
WHITEN_EPS = 5e-4
WHITEN_IMAGES = 5000        # training images the patch statistics come from
TRANSLATE = 2               # pixels of random translation (reflect-padded)
LABEL_SMOOTHING = 0.2
MOMENTUM = 0.85
WEIGHT_DECAY = 0.0153       # per 1024 examples, decoupled from the lr
BIAS_LR_SCALE = 64.0
WHITEN_BIAS_EPOCHS = 3
LOGIT_SCALE = 1 / 9
LOOKAHEAD_EVERY = 5
LOOKAHEAD_DECAY = 0.95 ** 5
LOOKAHEAD_POWER = 3


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder: what is switched on, and the settings the scripts changed with it."""
    name: str
    whiten: bool                 # first conv frozen as a patch whitening (else trained from default init)
    dirac: bool                  # other convs start as identities
    bias_lr_scale: float         # lr multiplier for BatchNorm biases (1: none)
    freeze_whiten_bias: bool     # whitening bias trained for the first WHITEN_BIAS_EPOCHS epochs only
    lookahead: bool
    tta_level: int               # 0 none, 1 mirror, 2 mirror and translations
    alternating_flip: bool       # else a fresh random flip every epoch
    lr: float                    # per 1024 examples
    bn_keep: float               # BatchNorm running averages keep this much of the old value
    warmup_fraction: float       # lr rises from 0.2x to 1x over this fraction of the steps ...
    final_lr_factor: float       # ... then falls linearly to this at the last step
    weight_decay: float = WEIGHT_DECAY   # per 1024 examples


def _ladder() -> tuple[Rung, ...]:
    """Each rung the one before with one trick more, in the ablation scripts' order (cifar10-zoo
    airbench/ablations/main0..main7); the lookahead script also raised the lr to 11.5, made BatchNorm
    forget faster (0.6) and ended the lr at 0.07x instead of 0."""
    rungs = [Rung("baseline", whiten=False, dirac=False, bias_lr_scale=1.0, freeze_whiten_bias=False,
                  lookahead=False, tta_level=1, alternating_flip=False, lr=10.0, bn_keep=0.9,
                  warmup_fraction=0.2, final_lr_factor=0.0)]
    for change in (dict(name="whiten", whiten=True), dict(name="dirac", dirac=True),
                   dict(name="scalebias", bias_lr_scale=BIAS_LR_SCALE), dict(name="freeze", freeze_whiten_bias=True),
                   dict(name="lookahead", lookahead=True, lr=11.5, bn_keep=0.6, warmup_fraction=0.23,
                        final_lr_factor=0.07),
                   dict(name="tta", tta_level=2), dict(name="altflip", alternating_flip=True)):
        rungs.append(replace(rungs[-1], **change))
    return tuple(rungs)


RUNGS = _ladder()


def recipe(cfg: RunConfig) -> Rung:
    """The config's rung with the fields that change the published recipe applied (none by default)."""
    rung = RUNGS[cfg.airbench_rung]
    tta = rung.tta_level if cfg.airbench_tta_level is None else cfg.airbench_tta_level
    return replace(rung, tta_level=tta, lr=rung.lr * cfg.airbench_lr_scale,
                   weight_decay=rung.weight_decay * cfg.airbench_wd_scale)


# --- the network --------------------------------------------------------------------------------

class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def batch_norm(width: int, keep: float) -> nn.BatchNorm2d:
    """airbench's BatchNorm: eps 1e-12, the scale fixed at 1 (only the bias trains)."""
    norm = nn.BatchNorm2d(width, eps=1e-12, momentum=1 - keep)
    norm.weight.requires_grad_(False)
    return norm


class Fp32Conv2d(nn.Conv2d):
    """A conv computed in fp32 under autocast (its parameters' names are a plain conv's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


class Fp32Linear(nn.Linear):
    """A linear layer computed in fp32 under autocast."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


def conv(c_in: int, c_out: int, dirac: bool, kernel: int = 3, padding: str | int = "same",
         bias: bool = False, fp32: bool = False) -> nn.Conv2d:
    layer = (Fp32Conv2d if fp32 else nn.Conv2d)(c_in, c_out, kernel, padding=padding, bias=bias)
    if bias:
        nn.init.zeros_(layer.bias)
    if dirac:  # the first c_in filters pass their input through: an implicit residual at the start
        nn.init.dirac_(layer.weight.data[:min(c_in, c_out)])
    return layer


class ConvGroup(nn.Module):
    def __init__(self, c_in: int, c_out: int, bn_keep: float, dirac: bool):
        super().__init__()
        self.conv1, self.pool = conv(c_in, c_out, dirac), nn.MaxPool2d(2)
        self.norm1, self.conv2 = batch_norm(c_out, bn_keep), conv(c_out, c_out, dirac)
        self.norm2, self.activ = batch_norm(c_out, bn_keep), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


def make_net(rung: Rung, base_width: int = 64, num_classes: int = 10, whiten_kernel: int = WHITEN_KERNEL,
             fp32_layers: str = "none") -> nn.Sequential:
    """The network; `fp32_layers` ("whiten", "head", "whiten+head") computes those in fp32 under autocast."""
    widths = (base_width, 4 * base_width, 4 * base_width)
    whiten_width = 2 * INPUT_SHAPE[0] * whiten_kernel ** 2
    net = nn.Sequential(
        conv(INPUT_SHAPE[0], whiten_width, False, whiten_kernel, padding=0, bias=True, fp32="whiten" in fp32_layers),
        nn.GELU(),
        ConvGroup(whiten_width, widths[0], rung.bn_keep, rung.dirac),
        ConvGroup(widths[0], widths[1], rung.bn_keep, rung.dirac),
        ConvGroup(widths[1], widths[2], rung.bn_keep, rung.dirac),
        nn.MaxPool2d(3),
        nn.Flatten(),
        (Fp32Linear if "head" in fp32_layers else nn.Linear)(widths[2], num_classes, bias=False),
        Scale(LOGIT_SCALE),
    )
    return net


def whitening_weights(images: torch.Tensor, kernel: int = WHITEN_KERNEL, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Conv weights (2 c k k, c, k, k) that whiten the k x k patches of `images` (N, c, H, W): each
    eigenvector of the patches' second-moment matrix, largest eigenvalue first, divided by
    sqrt(eigenvalue + eps), then the same filters negated (so that the GELU after keeps both signs)."""
    c = images.shape[1]
    patches = images.float().unfold(2, kernel, 1).unfold(3, kernel, 1)        # N, c, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * kernel * kernel)  # each as (c, k, k)
    moment = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(moment)                     # ascending
    eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.T.flip(0)   # rows, largest first
    filters = (eigenvectors / torch.sqrt(eigenvalues + eps)[:, None]).reshape(-1, c, kernel, kernel)
    return torch.cat((filters, -filters))


# --- data and augmentation ----------------------------------------------------------------------

def flip_masks(n: int, alternating: bool, generator: torch.Generator):
    """epoch -> which of the n images are mirrored in it. Alternating: a random half in even epochs
    and exactly the other half in odd ones (every image seen both ways every two epochs); else a
    fresh random half each epoch."""
    first = torch.rand(n, generator=generator) < 0.5

    def mask(epoch: int) -> torch.Tensor:
        if alternating:
            return first if epoch % 2 == 0 else ~first
        return torch.rand(n, generator=generator) < 0.5
    return mask


def translate_batch(padded: torch.Tensor, shifts: torch.Tensor, size: int) -> torch.Tensor:
    """Each padded image (B, C, size + 2r, size + 2r) cropped at its own offset (B, 2) in [0, 2r]."""
    b, c = padded.shape[:2]
    span = torch.arange(size, device=padded.device)
    rows = (shifts[:, 0, None] + span)[:, None, :, None]
    cols = (shifts[:, 1, None] + span)[:, None, None, :]
    return padded[torch.arange(b, device=padded.device)[:, None, None, None],
                  torch.arange(c, device=padded.device)[None, :, None, None], rows, cols]


def tta_views(x: torch.Tensor, level: int) -> list[tuple[float, torch.Tensor]]:
    """(weight, view) pairs whose weighted logits are the prediction: level 0 the image, level 1 it and
    its mirror (1/2 each), level 2 those two at 1/4 each and the mirrored pair of each one-pixel
    translation (up-left, down-right) at 1/8 each: six views."""
    if level == 0:
        return [(1.0, x)]
    mirrored = [(0.5, x), (0.5, x.flip(-1))]
    if level == 1:
        return mirrored
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    h, w = x.shape[-2:]
    shifted = [padded[..., :h, :w], padded[..., 2:h + 2, 2:w + 2]]
    return [(0.5 * wt, v) for wt, v in mirrored] + [(0.125, v) for s in shifted for v in (s, s.flip(-1))]


@torch.no_grad()
def tta_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, level: int, *,
                 batch_size: int, precision: Precision, layout: torch.memory_format) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(images), batch_size):
        x = images[start:start + batch_size]
        with precision.autocast():
            logits = sum(wt * model(v.contiguous(memory_format=layout)).float() for wt, v in tta_views(x, level))
        correct += (logits.argmax(1) == labels[start:start + batch_size]).sum().item()
    model.train()
    return correct / len(images)


# --- optimisation --------------------------------------------------------------------------------

def lr_factor(step: int, total: int, rung: Rung) -> float:
    """The lr multiplier at `step` of `total`: 0.2 up to 1 over the warm-up fraction, then linear to
    the rung's final factor (0 before the lookahead rung, 0.07 from it on)."""
    warm = int(rung.warmup_fraction * total)
    if step < warm:
        return 0.2 + 0.8 * step / warm
    return 1.0 + (rung.final_lr_factor - 1.0) * (step - warm) / max(total - warm, 1)


def make_optimizer(model: nn.Module, rung: Rung, batch_size: int) -> torch.optim.SGD:
    """Nesterov SGD with the lr and weight decay per 1024 examples: with the loss summed over the batch,
    the step is divided by 1024 (1 + 1/(1 - momentum)) so that neither the momentum nor the batch
    size changes the step size, and torch's coupled decay is divided by the group's lr."""
    kilostep = 1024 * (1 + 1 / (1 - MOMENTUM))
    lr, decay = rung.lr / kilostep, rung.weight_decay * batch_size / kilostep
    bias_lr = lr * rung.bias_lr_scale
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad or n == "0.bias"]
    if rung.bias_lr_scale == 1:  # before the scalebias rung: one lr for every parameter
        return torch.optim.SGD([p for _, p in trained], lr=lr, weight_decay=decay / lr, momentum=MOMENTUM,
                               nesterov=True)
    norm_biases = [p for n, p in trained if _is_norm(model, n)]
    others = [p for n, p in trained if not _is_norm(model, n)]
    groups = [dict(params=others, lr=lr, weight_decay=decay / lr),
              dict(params=norm_biases, lr=bias_lr, weight_decay=decay / bias_lr)]
    return torch.optim.SGD(groups, momentum=MOMENTUM, nesterov=True)


def _is_norm(model: nn.Module, name: str) -> bool:
    return isinstance(model.get_submodule(name.rpartition(".")[0]), nn.BatchNorm2d)


class Lookahead:
    """The weights' and BatchNorm statistics' moving average; each update pulls the average towards
    the weights and then sets the weights to it (Lookahead's slow weights, hlb-CIFAR10's EMA)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.average = {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}

    @torch.no_grad()
    def update(self, decay: float) -> None:
        state = self.model.state_dict()
        for key, average in self.average.items():
            average.lerp_(state[key], 1 - decay)
            state[key].copy_(average)

    @staticmethod
    def decay(step: int, total: int) -> float:
        return LOOKAHEAD_DECAY * (step / total) ** LOOKAHEAD_POWER


# --- the run -------------------------------------------------------------------------------------

def check_can_run(cfg: RunConfig) -> None:
    """CellSkipped, with the reason, for an execution this training cannot use here."""
    if cfg.execution == "script":
        raise CellSkipped("execution=script (TorchScript, deprecated) is D12.1's inference comparison; "
                          "airbench trains eager or compiled")
    if cfg.execution == "compile" and cfg.compile_backend == "inductor" and cfg.device == "cpu" \
            and not speed_methods.compiler():
        raise CellSkipped("torch.compile's inductor backend needs a C++ compiler on CPU and none is on PATH")


def run(cfg: AirbenchConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    check_can_run(cfg)
    with backend_flags(cfg):  # cudnn.benchmark on a GPU, as published; restored after the cell
        return train(cfg, on_epoch)


def train(cfg: RunConfig, on_epoch: EpochCallback | None = None) -> dict[str, float]:
    device = prepare(cfg)
    precision = Precision.for_device(device, cfg.dtype, cfg.grad_scaler)
    rung = recipe(cfg)
    epochs = cfg.airbench_epochs or float(cfg.epochs)
    layout = torch.channels_last if cfg.channels_last else torch.contiguous_format
    # what the first conv sees under autocast anyway (half the memory of fp32), unless it runs in fp32
    stored = torch.float32 if "whiten" in cfg.airbench_fp32_layers else precision.dtype

    data = load_splits(cfg.dataset, cfg.data_dir, INPUT_SHAPE, seed=cfg.seed,
                       train_limit=cfg.train_limit, test_limit=cfg.test_limit)
    mean = data.train.x.mean(dim=(0, 2, 3), keepdim=True)
    std = data.train.x.std(dim=(0, 2, 3), keepdim=True)
    normalized = ((data.train.x - mean) / std).to(device)
    padded = F.pad(normalized, (TRANSLATE,) * 4, mode="reflect").to(stored)
    labels = data.train.y.to(device)
    test_x = ((data.test.x - mean) / std).to(device, stored)
    test_y = data.test.y.to(device)
    generator = torch.Generator().manual_seed(cfg.seed)
    # a fixed random sample: class-folder data are sorted by class, so the first N would be one class
    whiten_sample = normalized[torch.randperm(len(normalized), generator=generator)[:WHITEN_IMAGES].to(device)]
    del normalized

    torch.manual_seed(cfg.seed)
    model = make_net(rung, cfg.airbench_base_width, data.num_classes, cfg.airbench_whiten_kernel,
                     cfg.airbench_fp32_layers).to(device, memory_format=layout)
    whiten = model[0]
    whiten.weight.requires_grad_(not rung.whiten)
    per_sample = flops.flops_per_sample(model, padded[:2, :, :32, :32].float().contiguous(memory_format=layout),
                                        cfg.dtype)
    net = speed_methods.compiled(model, cfg.compile_mode, cfg.compile_backend) \
        if cfg.execution == "compile" else model

    batch = min(cfg.batch_size, len(labels))
    steps_per_epoch = len(labels) // batch          # the last partial batch is dropped, as published
    total_steps = math.ceil(steps_per_epoch * epochs)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING, reduction="sum")
    flips = flip_masks(len(labels), rung.alternating_flip, generator)

    def evaluate() -> float:
        return tta_accuracy(model, test_x, test_y, rung.tta_level, batch_size=cfg.eval_batch_size,
                            precision=precision, layout=layout)

    probe = accuracy_probe.stratified_indices(test_y.cpu(), cfg.probe_size).to(test_y.device)
    probe_x, probe_y = test_x[probe], test_y[probe]

    def evaluate_probe() -> float:
        return tta_accuracy(model, probe_x, probe_y, rung.tta_level, batch_size=cfg.eval_batch_size,
                            precision=precision, layout=layout)

    watch = AccuracyWatch.from_config(cfg, evaluate, evaluate_probe)
    epoch_times: list[float] = []

    with timed(device) as setup:  # the whitening is part of the training, as in the paper's timer
        if rung.whiten:
            whiten.weight.data.copy_(whitening_weights(whiten_sample.float(), cfg.airbench_whiten_kernel))
        optimizer = make_optimizer(model, rung, batch)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, rung))
        lookahead = Lookahead(model) if rung.lookahead else None
    step, seen = 0, 0
    unclaimed = setup.seconds   # counted into the first checkpoint and the first epoch
    model.train()
    for epoch in range(math.ceil(epochs)):
        whiten.bias.requires_grad_(not rung.freeze_whiten_bias or epoch < WHITEN_BIAS_EPOCHS)
        steps = min(steps_per_epoch, total_steps - step)
        # the checkpoints' steps; a last epoch cut short may have fewer steps than checkpoints
        bounds = watch.bounds(steps) if watch is not None else [steps]
        order = torch.randperm(len(labels), generator=generator)[:steps * batch].to(device)
        mirror = flips(epoch).to(device)
        loss_sum = torch.zeros((), device=device)
        seconds, done, metrics = 0.0, 0, {}
        for bound in bounds:
            before = seen
            with timed(device) as clock:
                for i in range(done, bound):
                    idx = order[i * batch:(i + 1) * batch]
                    shifts = torch.randint(0, 2 * TRANSLATE + 1, (len(idx), 2), generator=generator).to(device)
                    x = translate_batch(padded[idx], shifts, INPUT_SHAPE[1])
                    x = torch.where(mirror[idx, None, None, None], x.flip(-1), x).contiguous(memory_format=layout)
                    optimizer.zero_grad(set_to_none=True)
                    with precision.autocast():
                        loss = loss_fn(net(x), labels[idx])
                    precision.backward_step(loss, optimizer)
                    scheduler.step()
                    step += 1
                    seen += len(idx)
                    loss_sum += loss.detach()
                    if lookahead is not None and step % LOOKAHEAD_EVERY == 0:
                        lookahead.update(Lookahead.decay(step, total_steps))
                if lookahead is not None and step == total_steps:
                    lookahead.update(1.0)   # end on the average itself
            trained, unclaimed = clock.seconds + unclaimed, 0.0
            seconds += trained
            done = bound
            if watch is not None:
                metrics["epoch_test_accuracy"] = watch.check(epochs=step / steps_per_epoch, seconds=trained,
                                                             samples=seen - before)
                if watch.should_stop:
                    break
        epoch_times.append(seconds)
        if on_epoch is not None:
            on_epoch(epoch, {"epoch_time_s": seconds, "train_loss": loss_sum.item() / max(done * batch, 1),
                             "lr_factor": lr_factor(step, total_steps, rung), **metrics})
        if watch is not None and watch.should_stop:
            break

    with timed(device) as evaluation:
        accuracy = evaluate()
    no_tta = accuracy if rung.tta_level == 0 else tta_accuracy(
        model, test_x, test_y, 0, batch_size=cfg.eval_batch_size, precision=precision, layout=layout)
    train_time = sum(epoch_times)
    result = {
        "train_time_s": train_time, "test_accuracy": accuracy, "test_accuracy_no_tta": no_tta,
        "tta_level": float(rung.tta_level), "eval_time_s": evaluation.seconds, "whiten_time_s": setup.seconds,
        "epochs_trained": step / steps_per_epoch, "steps": float(step), "samples_trained": float(seen),
        "samples_per_s": seen / train_time, "train_samples": float(len(labels)), "test_samples": float(len(test_y)),
        "param_count": float(sum(p.numel() for p in model.parameters())),
        "threads_used": float(torch.get_num_threads()), "scaler_skipped_steps": float(precision.skipped_steps()),
    }
    if watch is not None:
        result.update(watch.metrics())
    result["train_flops"] = per_sample * seen
    result.update(flops.flop_metrics(per_sample, samples=seen, train_time_s=train_time, device=device,
                                     dtype=cfg.dtype))
    return result
