"""airbench94 (experiments/airbench.py): the run at smoke scale, and each published piece checked on
its own against what the paper says it is: the frozen whitening layer (against an independent
eigendecomposition), dirac initialisation, the alternating flip, the test-time views, the lr
schedule, the per-1024 optimiser and the lookahead."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import experiments
from experiments import airbench
from experiments import make_config
from harness.errors import UserError
from harness.training import peak


def _smoke(**changes):
    experiment = experiments.get("airbench")
    return make_config({"experiment": "airbench", **experiment.smoke, **changes})


def test_the_smoke_run_learns_digits_and_logs_time_accuracy_with_and_without_tta_flops_and_mfu():
    epochs = []
    result = airbench.run(_smoke(epochs=3, airbench_epochs=2.5), lambda i, m: epochs.append(m))
    assert len(epochs) == 3 and result["epochs_trained"] == pytest.approx(2.5, abs=0.1)
    assert result["test_accuracy"] > 0.3 and result["test_accuracy_no_tta"] > 0.3   # chance is 0.1
    assert result["target_reached"] == 1 and 0 < result["time_to_accuracy_s"] <= result["train_time_s"]
    assert result["tta_level"] == 2 and result["train_flops"] == result["flops_per_sample"] * result["samples_trained"]
    assert result["train_time_s"] == pytest.approx(sum(e["epoch_time_s"] for e in epochs))
    # the smoke run is bf16: a CPU without AVX512-BF16 or AMX-BF16 emulates it, so it has no peak and
    # the run no MFU, with the reason in its place (harness/training/peak.py)
    emulated = peak.unsupported("cpu", "bf16")
    if emulated is None:
        assert 0 < result["mfu"] < 1
    else:
        assert "mfu" not in result and emulated in result["mfu_na"]
    assert epochs[-1]["lr_factor"] == pytest.approx(0.07)   # the schedule's end at the last step


def test_the_checks_during_training_leave_the_training_as_it_is():
    """The accuracy checks evaluate between steps, in eval mode, drawing no random numbers: a run that
    checks at every checkpoint (for a target it never reaches) trains and ends exactly as one that does
    not check at all. The JPEG ladder takes the airbench sweep's own runs as its top rung on this
    ground (benchmarks/jpeg_ladder.py)."""
    losses = {True: [], False: []}
    checked = airbench.run(_smoke(dtype="fp32", target_accuracy=0.999, probe_size=100),
                           lambda i, m: losses[True].append(m))
    unchecked = airbench.run(_smoke(dtype="fp32", target_accuracy=0.0), lambda i, m: losses[False].append(m))
    assert checked["target_reached"] == 0 and "epoch_test_accuracy" in losses[True][0]
    assert "epoch_test_accuracy" not in losses[False][0]
    assert [m["train_loss"] for m in losses[True]] == [m["train_loss"] for m in losses[False]]
    for metric in ("test_accuracy", "test_accuracy_no_tta", "steps", "epochs_trained"):
        assert checked[metric] == unchecked[metric], metric


def test_fractional_epochs_must_agree_with_the_epochs_started():
    with pytest.raises(UserError, match="set epochs = 10"):
        make_config({"experiment": "airbench", "airbench_epochs": 9.9, "epochs": 9})
    assert make_config({"experiment": "airbench", "airbench_epochs": 9.9, "epochs": 10}).epochs == 10


def _patches(images: np.ndarray, k: int = 2) -> np.ndarray:
    """Every k x k patch of (N, C, H, W) as a row (c, dy, dx), by loops: independent of unfold."""
    n, c, h, w = images.shape
    rows = [images[i, :, y:y + k, x:x + k].reshape(-1) for i in range(n) for y in range(h - k + 1)
            for x in range(w - k + 1)]
    return np.stack(rows)


def test_the_whitening_filters_whiten_the_patches_against_an_independent_eigendecomposition():
    g = torch.Generator().manual_seed(0)
    # correlated channels and pixels, as in real images: a smooth field plus noise, mixed across channels
    base = F.interpolate(torch.rand(6, 3, 4, 4, generator=g), size=(8, 8), mode="bilinear", align_corners=False)
    images = torch.einsum("ij,njhw->nihw", torch.tensor([[1.0, 0.5, 0.2], [0.3, 1.0, 0.4], [0.1, 0.6, 1.0]]),
                          base + 0.05 * torch.randn(6, 3, 8, 8, generator=g))
    weights = airbench.whitening_weights(images, eps=1e-6)
    assert weights.shape == (24, 3, 2, 2) and torch.equal(weights[12:], -weights[:12])

    patches = _patches(images.double().numpy())
    moment = patches.T @ patches / len(patches)
    eigenvalues = np.linalg.eigvalsh(moment)[::-1]                   # descending, as the filters are
    w = weights[:12].reshape(12, -1).double().numpy()
    whitened = w @ moment @ w.T                                       # the filters' outputs' second moment
    np.testing.assert_allclose(whitened, np.diag(eigenvalues / (eigenvalues + 1e-6)), atol=1e-3)

    # as a convolution, over the same images: the outputs are white (the layout is the conv's own)
    out = F.conv2d(images.double(), weights[:12].double()).permute(0, 2, 3, 1).reshape(-1, 12).numpy()
    np.testing.assert_allclose(out.T @ out / len(out), np.eye(12), atol=2e-3)


def test_the_whitening_layer_is_frozen_and_only_its_bias_trains_for_three_epochs(monkeypatch):
    torch.manual_seed(0)
    model = airbench.make_net(airbench.RUNGS[7], base_width=8)
    model[0].weight.requires_grad_(False)
    optimizer = airbench.make_optimizer(model, airbench.RUNGS[7], batch_size=128)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert id(model[0].weight) not in trained and id(model[0].bias) in trained
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(id(n.weight) not in trained and id(n.bias) in trained for n in norms)
    assert all(n.eps == 1e-12 and n.momentum == pytest.approx(0.4) for n in norms)

    # the run (rung 4: the freeze without the lookahead, whose pull to the average would move the
    # frozen bias once more): the whitening weight ends as the data made it; the bias stops after epoch 3
    made, nets = [], []
    whiten, build = airbench.whitening_weights, airbench.make_net
    monkeypatch.setattr(airbench, "whitening_weights", lambda *a, **k: made.append(whiten(*a, **k)) or made[-1])
    monkeypatch.setattr(airbench, "make_net", lambda *a, **k: nets.append(build(*a, **k)) or nets[-1])
    biases = []
    airbench.run(_smoke(epochs=5, target_accuracy=0.0, execution="eager", airbench_rung=4),
                 lambda i, m: biases.append(nets[0][0].bias.detach().clone()))
    net = nets[0]
    assert not net[0].weight.requires_grad and torch.equal(net[0].weight, made[0])
    assert not torch.equal(biases[0], torch.zeros_like(biases[0])) and not torch.equal(biases[2], biases[1])
    assert torch.equal(biases[3], biases[2]) and torch.equal(biases[4], biases[2])   # frozen from epoch 3 on


def test_dirac_init_makes_each_conv_pass_its_input_through_and_the_baseline_does_not():
    torch.manual_seed(0)
    group = airbench.make_net(airbench.RUNGS[2], base_width=8)[2]   # 24 -> 8: the first 8 input channels
    x = torch.randn(2, 8, 6, 6)
    assert torch.allclose(group.conv2(x), x)                           # 8 -> 8: identity
    wide = airbench.conv(4, 6, dirac=True)
    y = wide(torch.randn(1, 4, 5, 5))
    assert wide.weight[:4, :, 1, 1].equal(torch.eye(4)) and wide.weight[:4].abs().sum() == 4
    assert y.shape == (1, 6, 5, 5) and not wide.weight[4:].eq(0).all()  # the extra filters stay random
    base = airbench.make_net(airbench.RUNGS[1], base_width=8)[2].conv2
    assert not torch.allclose(base(x), x)


def test_alternating_flip_mirrors_each_image_in_every_other_epoch_and_random_flip_does_not():
    masks = airbench.flip_masks(1000, True, torch.Generator().manual_seed(0))
    e0, e1, e2, e3 = (masks(e) for e in range(4))
    assert torch.equal(e1, ~e0) and torch.equal(e2, e0) and torch.equal(e3, ~e0)
    assert 400 < int(e0.sum()) < 600
    random = airbench.flip_masks(1000, False, torch.Generator().manual_seed(0))
    r0, r1 = random(0), random(1)
    assert not torch.equal(r1, ~r0) and 400 < int((r0 == r1).sum()) < 600   # independent halves


def test_translation_crops_each_image_at_its_own_offset():
    images = torch.arange(2 * 1 * 6 * 6, dtype=torch.float32).reshape(2, 1, 6, 6)
    out = airbench.translate_batch(images, torch.tensor([[0, 0], [2, 1]]), 4)
    assert torch.equal(out[0], images[0, :, 0:4, 0:4]) and torch.equal(out[1], images[1, :, 2:6, 1:5])


def test_tta_views_one_two_or_six_with_weights_summing_to_one():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).reshape(2, 3, 5, 5)
    for level, count in ((0, 1), (1, 2), (2, 6)):
        views = airbench.tta_views(x, level)
        assert len(views) == count and sum(w for w, _ in views) == pytest.approx(1.0)
        assert all(v.shape == x.shape for _, v in views)
    views = airbench.tta_views(x, 2)
    assert torch.equal(views[1][1], x.flip(-1))
    up_left, down_right = views[2][1], views[4][1]
    assert torch.equal(up_left[..., 1:, 1:], x[..., :-1, :-1])       # shifted by one pixel each way
    assert torch.equal(down_right[..., :-1, :-1], x[..., 1:, 1:])
    assert torch.equal(views[3][1], up_left.flip(-1)) and [w for w, _ in views] == [0.25, 0.25] + [0.125] * 4


def test_lr_schedule_warms_up_over_23_percent_then_decays_to_0_07_and_the_baseline_to_0():
    rung = airbench.RUNGS[7]
    assert airbench.lr_factor(0, 100, rung) == pytest.approx(0.2)
    assert airbench.lr_factor(11, 100, rung) == pytest.approx(0.2 + 0.8 * 11 / 23)
    assert airbench.lr_factor(23, 100, rung) == pytest.approx(1.0)
    assert airbench.lr_factor(100, 100, rung) == pytest.approx(0.07)
    assert airbench.lr_factor(50, 100, rung) == pytest.approx(1 - 0.93 * 27 / 77)
    base = airbench.RUNGS[0]
    assert [airbench.lr_factor(s, 100, base) for s in (0, 10, 20, 60, 100)] == pytest.approx([0.2, 0.6, 1, 0.5, 0])


def test_the_optimiser_is_nesterov_with_the_published_lr_and_decay_per_1024_examples():
    model = airbench.make_net(airbench.RUNGS[7], base_width=8)
    model[0].weight.requires_grad_(False)
    opt = airbench.make_optimizer(model, airbench.RUNGS[7], batch_size=512)
    kilostep = 1024 * (1 + 1 / (1 - 0.85))
    others, biases = opt.param_groups
    assert opt.defaults["nesterov"] and opt.defaults["momentum"] == 0.85
    assert others["lr"] == pytest.approx(11.5 / kilostep) and biases["lr"] == pytest.approx(64 * 11.5 / kilostep)
    # the decay per step, lr x weight_decay, is the same for both groups: 0.0153 x batch / kilostep
    for group in (others, biases):
        assert group["lr"] * group["weight_decay"] == pytest.approx(0.0153 * 512 / kilostep)
    baseline = airbench.make_optimizer(airbench.make_net(airbench.RUNGS[0], base_width=8), airbench.RUNGS[0], 512)
    assert len(baseline.param_groups) == 1 and baseline.param_groups[0]["lr"] == pytest.approx(10.0 / kilostep)


def test_lookahead_pulls_the_weights_to_their_average_and_ends_on_it():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    look = airbench.Lookahead(model)
    with torch.no_grad():
        model.weight.fill_(1.0)
    look.update(0.75)
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.25, 0.25])
    with torch.no_grad():
        model.weight.fill_(2.0)
    look.update(1.0)   # the last update: the weights become the average, which does not move
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.25, 0.25])
    assert airbench.Lookahead.decay(50, 100) == pytest.approx(0.95 ** 5 * 0.125)


def test_the_ladder_switches_one_trick_on_per_rung_in_the_papers_order():
    names = [r.name for r in airbench.RUNGS]
    assert names == ["baseline", "whiten", "dirac", "scalebias", "freeze", "lookahead", "tta", "altflip"]
    switches = ["whiten", "dirac", "bias_lr_scale", "freeze_whiten_bias", "lookahead", "tta_level", "alternating_flip"]
    for k, (before, after) in enumerate(zip(airbench.RUNGS, airbench.RUNGS[1:])):
        changed = [s for s in switches if getattr(before, s) != getattr(after, s)]
        assert changed == [switches[k]], (after.name, changed)
    final = airbench.RUNGS[-1]
    assert (final.lr, final.bn_keep, final.tta_level, final.bias_lr_scale) == (11.5, 0.6, 2, 64.0)
    assert math.isclose(final.warmup_fraction, 0.23) and math.isclose(final.final_lr_factor, 0.07)


def test_the_published_network_has_its_parameter_count():
    """1,971,640 parameters without BatchNorm's fixed scales (cifar10-zoo ablations README)."""
    model = airbench.make_net(airbench.RUNGS[7])
    counted = sum(p.numel() for p in model.parameters())
    scales = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert counted - scales == 1_971_640


def test_the_sweeps_cpu_scale_starts_with_airbench94_as_published_on_the_cifar10_jpegs():
    from harness.specs import sweep_spec

    cells = sweep_spec.expand(sweep_spec.load("airbench"), "cpu", {"data_dir": "/data/cifar10-jpeg"})
    first = cells[0].config
    assert (first.airbench_rung, first.airbench_epochs, first.epochs, first.batch_size, first.airbench_base_width) \
        == (7, 9.9, 10, 1024, 64)
    assert (first.dataset, first.device, first.dtype, first.channels_last, first.target_accuracy) \
        == ("imagefolder", "cpu", "bf16", True, 0.94)
    assert len(cells) == 3 and {c.config.airbench_rung for c in cells} == {7}   # 3 repeats, in rounds
    ladder = sweep_spec.expand(sweep_spec.load("airbench"), "cpu-ladder", {"data_dir": "/data/cifar10-jpeg"})
    assert [c.config.airbench_rung for c in ladder] == [7, 6, 5] * 3   # airbench94 first in every round


# --- what the CPU study may change in the published recipe ---------------------------------------

@pytest.mark.parametrize("values, words", [
    ({"airbench_tta_level": 3}, ["airbench_tta_level", "2"]),
    ({"airbench_whiten_kernel": 5}, ["airbench_whiten_kernel", "4"]),
    ({"airbench_lr_scale": 0}, ["airbench_lr_scale", "0"]),
    ({"airbench_wd_scale": -1}, ["airbench_wd_scale", "0"]),
    ({"airbench_fp32_layers": "all"}, ["airbench_fp32_layers", "whiten+head"]),
])
def test_each_recipe_field_refuses_a_bad_value_in_one_sentence(values, words):
    with pytest.raises(UserError) as err:
        make_config({"experiment": "airbench", **values})
    message = str(err.value)
    assert "\n" not in message and message.endswith(".")
    for word in words:
        assert word in message


def test_the_recipe_fields_leave_the_published_recipe_and_its_cell_id_alone_by_default():
    published = make_config({"experiment": "airbench"})
    assert airbench.recipe(published) == airbench.RUNGS[7]
    named = make_config({"experiment": "airbench", "airbench_whiten_kernel": 2, "airbench_lr_scale": 1.0,
                         "airbench_wd_scale": 1.0, "airbench_fp32_layers": "none"})
    assert named.cell_id() == published.cell_id()
    changed = airbench.recipe(make_config({"experiment": "airbench", "airbench_tta_level": 0,
                                           "airbench_lr_scale": 2.0, "airbench_wd_scale": 0.5}))
    assert (changed.tta_level, changed.lr, changed.weight_decay) == (0, 23.0, airbench.WEIGHT_DECAY / 2)
    model = airbench.make_net(changed)
    optimiser = airbench.make_optimizer(model, changed, 1024)
    kilostep = 1024 * (1 + 1 / (1 - airbench.MOMENTUM))
    group = optimiser.param_groups[0]
    assert group["lr"] == pytest.approx(23.0 / kilostep)
    assert group["lr"] * group["weight_decay"] == pytest.approx(airbench.WEIGHT_DECAY / 2 * 1024 / kilostep)


def test_fp32_layers_compute_in_fp32_under_bf16_autocast_and_the_others_do_not():
    x = torch.randn(2, 3, 32, 32)
    for layers, whiten_dtype, head_dtype in (("none", torch.bfloat16, torch.bfloat16),
                                             ("whiten", torch.float32, torch.bfloat16),
                                             ("whiten+head", torch.float32, torch.float32)):
        model = airbench.make_net(airbench.RUNGS[7], base_width=8, fp32_layers=layers)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert model[0](x).dtype == whiten_dtype
            assert model(x).dtype == head_dtype
        assert dict(model.named_parameters()).keys() == dict(airbench.make_net(airbench.RUNGS[7], 8).named_parameters()).keys()


def test_a_3x3_whitening_patch_whitens_and_trains_with_every_recipe_field_changed():
    images = torch.randn(64, 3, 8, 8)
    filters = airbench.whitening_weights(images, kernel=3)
    assert filters.shape == (54, 3, 3, 3)
    out = F.conv2d(images, filters[:27]).permute(1, 0, 2, 3).reshape(27, -1)
    covariance = out @ out.T / out.shape[1]   # the whitened patches: near the identity
    assert torch.allclose(covariance.diagonal(), torch.ones(27), atol=0.05)
    result = airbench.run(_smoke(airbench_whiten_kernel=3, airbench_tta_level=0, airbench_fp32_layers="whiten+head",
                                 airbench_lr_scale=0.7, airbench_wd_scale=2.0))
    assert result["tta_level"] == 0 and result["test_accuracy"] == result["test_accuracy_no_tta"]
    assert result["test_accuracy"] > 0.2   # chance is 0.1


@pytest.mark.slow
def test_the_cpu_studys_space_loads_with_the_published_recipe_first_and_a_smoke_trial_of_it_runs(tmp_path):
    from harness.cli import main
    from harness.specs import study_spec
    from harness.studies.deciding.variants import values_of, Variant

    spec = study_spec.load("airbench_cpu")
    assert {"airbench_tta_level", "airbench_fp32_layers", "airbench_whiten_kernel", "airbench_lr_scale",
            "airbench_wd_scale", "batch_size", "airbench_base_width", "epochs", "dtype", "channels_last",
            "execution"} <= set(spec.space)
    published = make_config(values_of(spec, spec.fixed("cpu", {"data_dir": "/x"}),
                                      Variant("", spec.baseline.params), 0))
    assert airbench.recipe(published) == airbench.RUNGS[7]   # the baseline trial is airbench94 as published
    assert (published.batch_size, published.airbench_base_width, published.airbench_epochs) == (1024, 64, 9.9)
    for name in ("airbench_tta_level", "airbench_fp32_layers", "airbench_whiten_kernel"):   # each value trains
        for value in spec.space[name].choices:
            make_config({**published.model_dump(exclude_defaults=True), name: value})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", "airbench_cpu", "--scale", "smoke", "--n-trials", "1", "--tracking-uri", uri,
                 "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--no-progress", "--out", str(tmp_path)]) == 0
    trials = (tmp_path / "study_airbench_cpu-smoke-trials.csv").read_text().splitlines()
    assert len(trials) == 2 and ",complete," in trials[1]
