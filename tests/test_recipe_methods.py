"""The recipe's methods beyond the book (one-cycle lr, BatchNorm, label smoothing, a weight EMA,
Composer's selective backprop): each runs through `recipe.run` alone and stacked, does what it says
at the step where it acts, leaves every existing cell id alone while off, and a bad value is one
sentence. Digits and the tiny CNN: a run takes a second or two."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from experiments import make_config, recipe
from experiments.descriptors.recipe import TrainingMethodsFields
from harness.errors import CellSkipped, UserError
from harness.specs import study_spec
from harness.training import speed_methods
from harness.training import train as train_module
from harness.fields.catalogue import CHANGES, SPEED_METHODS, speed_method_of
from harness.training.data import load_splits
from harness.training.models import TinyCNN
from harness.training.pruning import prune_conv_filters
from harness.training.train import evaluate
from conftest import assert_one_sentence_exit_2

DIGITS = {"experiment": "recipe", "model": "tiny_cnn", "dataset": "digits", "train_limit": 512, "test_limit": 128,
          "epochs": 2, "batch_size": 32, "optimizer": "adam", "lr": 0.005, "threads": 1}
STEPS_PER_EPOCH = 512 // 32
BOOK_METHODS = {"channels_last": True, "dtype": "bf16", "sparsity": 0.25, "pruning_backend": "torch-pruning",
                "execution": "compile", "compile_backend": "eager", "batch_size": 64, "lr_base_batch": 32}
NEW_METHODS = {
    "one_cycle": {"lr_schedule": "one_cycle", "schedule_epochs": 2},
    "batchnorm": {"batchnorm": True},
    "label_smoothing": {"label_smoothing": 0.1},
    "ema": {"ema_decay": 0.5},
    "selective_backprop": {"selective_backprop_keep": 0.5},
}


def _run(**values):
    epochs = []
    result = recipe.run(make_config({**DIGITS, **values}), lambda e, m: epochs.append(m))
    return result, [e["train_loss"] for e in epochs]


@pytest.fixture
def steps(monkeypatch):
    """Every optimizer step of a run: its lr, batch size and loss function, as train_step saw them."""
    seen = []
    original = train_module.train_step

    def spy(model, optimizer, loss_fn, x, y, precision=None):
        seen.append({"lr": optimizer.param_groups[0]["lr"], "batch": len(y), "loss_fn": loss_fn})
        return original(model, optimizer, loss_fn, x, y, precision)

    monkeypatch.setattr(train_module, "train_step", spy)
    return seen


# --- each alone, and stacked --------------------------------------------------------------------

@pytest.mark.parametrize("method", NEW_METHODS)
def test_each_method_alone_runs_and_changes_what_it_says(method):
    plain, plain_losses = _run()
    result, losses = _run(**NEW_METHODS[method])
    assert result["test_accuracy"] > 0.3                     # it still learns (chance: 0.1)
    if method == "ema":   # the training is the book's, step for step; only what is evaluated differs
        assert losses == plain_losses and result["test_accuracy"] != plain["test_accuracy"]
    else:
        assert losses != plain_losses


def test_every_method_stacks_with_every_other_and_the_books_on_one_process():
    stacked = {k: v for method in NEW_METHODS.values() for k, v in method.items()}
    result, losses = _run(**BOOK_METHODS, **stacked, epochs=3)
    assert result["param_count"] < result["param_count_before"]       # pruned, BatchNorm channels with the filters
    assert result["selected_steps"] > 0 and len(losses) == 3
    assert result["test_accuracy"] > 0.3


@pytest.mark.slow
@pytest.mark.multiprocess
def test_every_method_stacks_on_two_ddp_ranks(store):
    """BatchNorm without SyncBatchNorm: each rank normalises with its own batch; the EMA copies the
    module inside DDP's wrapper, and rank 0 evaluates it."""
    from harness.cells import run_single

    stacked = {k: v for method in NEW_METHODS.values() for k, v in method.items()}
    cfg = make_config({**DIGITS, **BOOK_METHODS, **stacked, "epochs": 3, "world_size": 2, "threads": 1})
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    m = result.metrics
    assert m["ranks"] == 2 and m["selected_steps"] > 0 and m["test_accuracy"] > 0.3


# --- one-cycle lr -----------------------------------------------------------------------------

def test_the_one_cycle_lr_rises_to_the_effective_lr_then_falls_to_zero_and_stays(steps):
    result, _ = _run(lr_schedule="one_cycle", schedule_epochs=1, lr_warmup_fraction=0.25, lr_factor=2.0)
    lrs = [s["lr"] for s in steps]
    peak = result["lr_effective"]
    assert peak == pytest.approx(DIGITS["lr"] * 2.0)
    warm = round(0.25 * STEPS_PER_EPOCH)                                   # planned over the first epoch's steps
    assert lrs[0] == pytest.approx(peak / warm) and lrs[warm - 1] == pytest.approx(peak)
    assert all(a < b for a, b in zip(lrs[:warm - 1], lrs[1:warm]))        # rises
    assert all(a > b for a, b in zip(lrs[warm - 1:STEPS_PER_EPOCH - 1], lrs[warm:STEPS_PER_EPOCH]))   # falls
    assert lrs[STEPS_PER_EPOCH:] == [0.0] * STEPS_PER_EPOCH              # past the planned epochs: held at 0


def test_the_one_cycle_is_planned_over_its_epochs_not_the_runs(steps):
    _run(lr_schedule="one_cycle", schedule_epochs=4, epochs=2)
    lrs = [s["lr"] for s in steps]
    assert max(lrs) == pytest.approx(DIGITS["lr"]) and lrs[-1] > 0.4 * DIGITS["lr"]   # half-way down at the end


def test_a_constant_schedule_trains_every_step_at_the_effective_lr(steps):
    _run()
    assert {s["lr"] for s in steps} == {DIGITS["lr"]}


def test_the_one_cycle_factor_by_step():
    # 2 steps up to the peak at step 1, 9 down to 0 at step 10, held at 0
    assert [speed_methods.one_cycle_factor(s, 10, 0.2) for s in range(12)] == \
        pytest.approx([0.5, 1.0, *(k / 9 for k in range(8, 0, -1)), 0.0, 0.0])
    assert [speed_methods.one_cycle_factor(s, 4, 0.0) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]   # no warm-up


# --- BatchNorm --------------------------------------------------------------------------------

def test_batchnorm_follows_every_conv_in_its_block_and_survives_pruning_at_init():
    model = speed_methods.with_batchnorm(TinyCNN())
    for block in (model.layer1, model.layer2):
        assert isinstance(block[0], nn.Conv2d) and isinstance(block[1], nn.BatchNorm2d)
        assert block[1].num_features == block[0].out_channels
    model = prune_conv_filters(model, 0.5, torch.rand(8, 1, 16, 16), "torch-pruning")
    for block in (model.layer1, model.layer2):
        assert block[0].out_channels == block[1].num_features < 16
    assert model(torch.rand(2, 1, 16, 16)).shape == (2, 10)


@pytest.mark.parametrize("backend", ["torch-pruning", "nni"])
def test_the_recipe_trains_a_pruned_cnn_with_batchnorm_whose_statistics_start_fresh(backend, monkeypatch):
    trained = []
    original = speed_methods.forget_batchnorm_statistics
    monkeypatch.setattr(speed_methods, "forget_batchnorm_statistics", lambda m: trained.append(original(m)) or m)
    plain, _ = _run(epochs=1)
    result, _ = _run(epochs=1, batchnorm=True, sparsity=0.5, pruning_backend=backend)
    assert result["param_count_before"] == plain["param_count_before"] + 2 * (8 + 16)   # weight and bias a channel
    assert result["param_count"] < result["param_count_before"]
    norms = [m for m in trained[0].modules() if isinstance(m, nn.BatchNorm2d)]
    assert [n.num_features for n in norms] == [4, 8]                 # half of each conv's channels kept
    assert all(int(n.num_batches_tracked) > 0 for n in norms)        # they did train


def test_nni_leaves_batchnorm_statistics_of_its_traced_batch_and_the_recipe_forgets_them():
    model = prune_conv_filters(speed_methods.with_batchnorm(TinyCNN()), 0.5, torch.rand(8, 1, 16, 16) + 1, "nni")
    assert any(m.running_mean.abs().sum() > 0 for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    speed_methods.forget_batchnorm_statistics(model)
    assert all(m.running_mean.abs().sum() == 0 for m in model.modules() if isinstance(m, nn.BatchNorm2d))


@pytest.mark.parametrize("model, reason", [("mlp_d2l", "has no nn.Conv2d"),
                                           ("resnet18_d2l", "has BatchNorm layers already")])
def test_batchnorm_on_a_model_it_does_not_fit_is_a_skip_with_its_reason(model, reason):
    with pytest.raises(CellSkipped, match=reason):
        recipe.run(make_config({**DIGITS, "model": model, "batchnorm": True}))


# --- label smoothing ----------------------------------------------------------------------------

def test_label_smoothing_is_the_loss_every_step_trains_on(steps):
    _run(label_smoothing=0.1)
    assert {s["loss_fn"].label_smoothing for s in steps} == {0.1}
    logits, y = torch.tensor([[8.0, 0.0, 0.0]]), torch.tensor([0])
    assert speed_methods.smoothed_loss(0.1)(logits, y) > speed_methods.smoothed_loss(0.0)(logits, y) * 10


# --- EMA ----------------------------------------------------------------------------------------

def test_every_evaluation_reads_the_weight_average_not_the_trained_weights(monkeypatch):
    made = []
    original = speed_methods.averaged
    monkeypatch.setattr(speed_methods, "averaged", lambda model, decay: made.append((original(model, decay), model))
                        or made[-1][0])
    result, _ = _run(ema_decay=0.9, batchnorm=True, target_accuracy=0.2, evals_per_epoch=2)
    ema, trained = made[0]
    assert int(ema.n_averaged) == 2 * STEPS_PER_EPOCH                  # updated after every step
    test = load_splits("digits", "data", (1, 16, 16), seed=0, train_limit=512, test_limit=128).test
    averaged = evaluate(ema.module, test, batch_size=1000, device=torch.device("cpu"))
    raw = evaluate(trained, test, batch_size=1000, device=torch.device("cpu"))
    assert result["test_accuracy"] == averaged != raw
    assert result["accuracy_checks"] == 4 and result["best_test_accuracy"] >= averaged
    # BatchNorm's running statistics are averaged too, not copied from the trained model
    norm, raw_norm = ema.module.layer1[1], trained.layer1[1]
    assert not torch.equal(norm.running_mean, raw_norm.running_mean)


# --- selective backprop -------------------------------------------------------------------------

def test_selective_backprop_trains_on_half_of_every_other_batch_inside_its_window(steps):
    result, _ = _run(selective_backprop_keep=0.5)
    # 32 steps; the window is [0.5, 0.9) of them: steps 16-28; interrupt 2: every second batch of an epoch is whole
    expected = [16 if 16 <= s <= 28 and (s % STEPS_PER_EPOCH) % 2 == 0 else 32 for s in range(2 * STEPS_PER_EPOCH)]
    assert [s["batch"] for s in steps] == expected
    assert result["selected_steps"] == expected.count(16) == 7
    assert result["samples_trained"] == 2 * 512                      # every sample was seen, scored or stepped on


def test_selective_backprop_draws_towards_the_highest_losses():
    sb = speed_methods.SelectiveBackprop(None, None, keep=0.25, start=0.0, end=1.0, interrupt=0, steps_per_epoch=1,
                                         epochs=1, autocast=None, generator=torch.Generator().manual_seed(0))
    losses = torch.arange(100.0).flip(0)                                # sample 0 has the highest loss
    draws = torch.cat([sb.draw(losses) for _ in range(200)])
    assert all(len(sb.draw(losses)) == 25 for _ in range(3))
    assert draws.float().mean() < 30                                      # uniform would be 49.5
    assert len(sb.draw(torch.tensor([1.0, 2.0]))) == 1                   # at least one sample


# --- identity, mistakes, the table --------------------------------------------------------------

RECIPE_PIN = ({'experiment': 'recipe', 'model': 'cnn', 'dataset': 'cifar10', 'optimizer': 'adam', 'lr': 1e-05,
               'lr_base_batch': 64, 'weight_decay': 0.005, 'pruning_backend': 'torch-pruning', 'epochs': 11,
               'stop_at_target': True, 'evals_per_epoch': 4, 'device': 'cpu', 'target_from_epoch': 10},
              '5282ea00426edab2')   # tests/test_cell_ids.py's shipped recipe cell


def test_the_methods_off_leave_a_shipped_cells_id_as_it_was():
    values, cell_id = RECIPE_PIN
    off = {"lr_schedule": "constant", "schedule_epochs": 0, "lr_warmup_fraction": 0.2, "batchnorm": False,
           "label_smoothing": 0.0, "ema_decay": 0.0, "selective_backprop_keep": 1.0, "selective_backprop_start": 0.5,
           "selective_backprop_end": 0.9, "selective_backprop_interrupt": 2}
    assert set(off) == set(TrainingMethodsFields.model_fields)
    assert make_config({**values, **off}).cell_id() == cell_id
    assert make_config({**values, "batchnorm": True}).cell_id() != cell_id


@pytest.mark.parametrize("values, words", [
    ({"label_smoothing": 1.0}, ["label_smoothing", "[0, 1)", "got 1.0"]),
    ({"label_smoothing": -0.1}, ["label_smoothing", "[0, 1)"]),
    ({"ema_decay": 1.0}, ["ema_decay", "[0, 1)"]),
    ({"ema_decay": -0.5}, ["ema_decay", "[0, 1)"]),
    ({"lr_schedule": "one_cycle"}, ["one_cycle needs schedule_epochs of at least 1 (got 0)"]),
    ({"lr_schedule": "one_cycle", "schedule_epochs": 0.5}, ["at least 1 (got 0.5)"]),
    ({"lr_schedule": "cosine"}, ["lr_schedule", "'constant' or 'one_cycle'"]),
    ({"schedule_epochs": 4}, ["shape a one_cycle schedule"]),
    ({"lr_schedule": "one_cycle", "schedule_epochs": 4, "lr_warmup_fraction": 1.0}, ["lr_warmup_fraction", "[0, 1)"]),
    ({"selective_backprop_keep": 0}, ["selective_backprop_keep", "(0, 1]"]),
    ({"selective_backprop_keep": 0.5, "selective_backprop_start": 0.9, "selective_backprop_end": 0.5},
     ["selective_backprop_start < selective_backprop_end"]),
    ({"selective_backprop_start": 0.1}, ["set selective_backprop_keep below 1"]),
    ({"batchnorm": "sometimes"}, ["batchnorm", "bool"]),
])
def test_a_bad_value_is_one_sentence(values, words):
    with pytest.raises(UserError) as err:
        make_config({**DIGITS, **values})
    message = str(err.value)
    assert "\n" not in message and message.endswith(".") and message.count(". ") == 0, message
    for word in words:
        assert word in message, message


def test_a_bad_value_on_the_command_line_is_one_sentence_and_exit_2(tmp_path, capsys):
    assert_one_sentence_exit_2(["run", "recipe", "--set", "label_smoothing=1.5", "--tracking-uri",
                                f"sqlite:///{tmp_path / 'm.db'}"], ["label_smoothing", "[0, 1)"], capsys)


def test_every_method_field_is_in_the_table_with_what_it_changes():
    for name in TrainingMethodsFields.model_fields:
        assert speed_method_of(name) is not None, name
    assert {m.changes for m in SPEED_METHODS.values()} <= set(CHANGES)
    assert {SPEED_METHODS[m].changes for m in ("one_cycle", "batchnorm", "label_smoothing", "ema",
                                               "selective_backprop")} == {"optimizer", "model", "loss", "data"}


def test_the_speed_recipe_study_says_what_each_searched_method_changes_as_the_table_does():
    spec = study_spec.load("study_speed_recipe")
    assert 128.0 in spec.space["lr_factor"].choices
    for name, param in spec.space.items():
        assert spec.space[name].admits(spec.baseline.params[name]), name
        methods = {speed_method_of(f) for f in param.field_names()}
        assert None not in methods, name
        changes = {SPEED_METHODS[m].changes for m in methods} - {"speed only"}
        if changes:
            assert any(spec.verify.changes[name].startswith(f"the {c}") for c in changes), name
        else:
            assert name not in spec.verify.changes, name
    # the baseline is the book's loop: every new method off
    off = make_config({**spec.fixed("smoke"), **{k: v for name, p in spec.space.items()
                                                  for k, v in p.fields(spec.baseline.params[name]).items()}})
    assert not off.batchnorm and off.lr_schedule == "constant" and off.ema_decay == off.label_smoothing == 0.0
    assert off.selective_backprop_keep == 1.0
