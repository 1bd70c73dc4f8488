"""The recipe experiment: with every method off it is the book's loop; methods stack; a combination
that cannot run here is a skip with its reason."""

from __future__ import annotations

import pytest
import torch

import experiments
from experiments import recipe
from harness.training import speed_methods
from harness.cells import run_single
from experiments import make_config
from harness.errors import CellSkipped
from harness.machine.hardware import usable_core_count
from conftest import TINY_BASE, mlflow_client

TINY = {k: v for k, v in TINY_BASE.items() if k != "warmup_epochs"}   # the recipe has none: every step counts
TINY.update(experiment="recipe", optimizer="adam")


def _run(**values):
    epochs = []
    cfg = make_config({**TINY, **values})
    return recipe.run(cfg, lambda e, m: epochs.append(m)), epochs


def test_with_every_method_off_it_trains_exactly_as_the_books_loop():
    ours, our_epochs = _run(epochs=2)
    book, book_epochs = [], []
    cfg = make_config({**TINY_BASE, "experiment": "pruning", "warmup_epochs": 0, "epochs": 2, "optimizer": "adam"})
    book = experiments.get("pruning").run(cfg, lambda e, m: book_epochs.append(m))
    assert ours["test_accuracy"] == book["test_accuracy"]
    assert [e["train_loss"] for e in our_epochs] == [e["train_loss"] for e in book_epochs]
    assert ours["flops_per_sample"] == book["flops_per_sample"] and ours["lr_effective"] == TINY["lr"]


def test_methods_stack_and_each_does_what_it_says():
    result, epochs = _run(epochs=3, channels_last=True, dtype="bf16", sparsity=0.5, pruning_backend="torch-pruning",
                          execution="compile", compile_backend="eager", batch_size=32, lr_base_batch=16)
    assert result["lr_effective"] == pytest.approx(TINY["lr"] * 32 / 16)    # linear scaling with the batch
    assert result["param_count"] < result["param_count_before"]             # pruned at initialisation
    plain, _ = _run(epochs=1)
    assert result["flops_per_sample"] < plain["flops_per_sample"]           # fewer filters, fewer FLOPs
    assert len(epochs) == 3 and result["test_accuracy"] > 0.6               # and it still learns (chance: 0.1)


def test_lr_factor_multiplies_the_lr_before_the_batch_scaling():
    result, _ = _run(epochs=1, lr_factor=4.0, batch_size=32, lr_base_batch=16)
    assert result["lr_effective"] == pytest.approx(TINY["lr"] * 4 * 32 / 16)


def test_channels_last_really_runs_the_convolutions_in_nhwc(monkeypatch):
    seen = []
    original = speed_methods.to_channels_last

    def spy(model):
        model = original(model)
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        conv.register_forward_hook(lambda mod, args, out: seen.append(
            out.is_contiguous(memory_format=torch.channels_last) and out.shape[1] > 1))
        return model

    monkeypatch.setattr(speed_methods, "to_channels_last", spy)
    _run(epochs=1, channels_last=True)
    assert seen and all(seen)


@pytest.mark.parametrize("values, reason", [
    ({"model": "mlp_d2l", "channels_last": True}, "channels_last is a layout for 4-D image batches"),
    ({"model": "mlp_d2l", "sparsity": 0.5}, "model mlp_d2l has no nn.Conv2d"),
    ({"execution": "script"}, "a recipe trains eager or compiled"),
    ({"world_size": 2, "threads": usable_core_count()}, "cores with one thread per core"),
    ({"device": "cuda"}, "CUDA"),
])
def test_a_combination_that_cannot_run_here_is_a_skip_with_its_reason(values, reason):
    if values.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(CellSkipped, match=reason):
        recipe.run(make_config({**TINY, **values}))


def test_inductor_without_a_compiler_is_a_skip(monkeypatch):
    monkeypatch.setattr(speed_methods, "compiler", lambda: None)
    with pytest.raises(CellSkipped, match="needs a C\\+\\+ compiler"):
        recipe.run(make_config({**TINY, "execution": "compile"}))


def test_a_skipped_combination_is_recorded_with_its_reason(store):
    result = run_single(make_config({**TINY, "execution": "script"}), store)
    assert result.outcome == "skipped"
    tags = mlflow_client(store).get_run(result.run_id).data.tags
    assert tags["harness.outcome"] == "skipped" and "a recipe trains eager or compiled" in tags["harness.reason"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ddp_layout_trains_on_two_ranks_to_the_target_and_stops_together(store):
    cfg = make_config({**TINY, "epochs": 4, "world_size": 2, "threads": 1, "batch_is_global": True,
                       "batch_size": 64, "lr_base_batch": 32, "target_accuracy": 0.6, "stop_at_target": True,
                       "evals_per_epoch": 2, "channels_last": True})
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    m = result.metrics
    assert m["ranks"] == 2 and m["global_batch"] == 64 and m["threads_used"] == 1
    assert m["target_reached"] == 1.0 and m["epochs_trained"] == m["epochs_to_accuracy"]
    assert m["samples_trained"] == pytest.approx(m["epochs_trained"] * (TINY["train_limit"] // 2) * 2)
    assert m["time_to_accuracy_s"] == pytest.approx(m["train_time_s"])   # stopped at the check that met it
    history = mlflow_client(store).get_metric_history(result.run_id, "epoch_test_accuracy")
    assert len(history) == len(mlflow_client(store).get_metric_history(result.run_id, "epoch_time_s")) >= 1


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ddp_ranks_give_up_together_on_rank_0s_clock(store):
    # each rank's clock crosses the give-up time at its own moment; had each decided alone, one rank
    # would stop while the other waited for it in the next step's all-reduce
    cfg = make_config({**TINY, "epochs": 4, "world_size": 2, "threads": 1, "target_accuracy": 0.999,
                       "give_up_after_s": 0.05, "evals_per_epoch": 2})
    result = run_single(cfg, store)
    assert result.outcome == "ok", result.reason
    m = result.metrics
    assert m["gave_up"] == 1.0 and m["target_reached"] == 0.0 and m["epochs_trained"] < 4
    assert "time_to_accuracy_s" not in m


def test_a_rank_beats_at_every_step_so_its_launcher_never_takes_a_long_epoch_for_a_hang(tmp_path, monkeypatch):
    # A torchrun rank that touches no heartbeat for dist_timeout_s is killed as hung; the recipe's
    # epochs, with their checks on the test set, can outlast that while making progress.
    from harness.distributed import rank as rank_module
    from harness.distributed.rank import RankContext

    monkeypatch.setattr(rank_module, "HEARTBEAT_EVERY_S", 0.0)   # every beat touches the file
    touches = []
    beat_file = tmp_path / "beat-rank0"
    ctx = RankContext(device=torch.device("cpu"), heartbeat_file=beat_file)
    original = ctx.beat
    monkeypatch.setattr(ctx, "beat", lambda: (touches.append(1), original()))
    cfg = make_config({**TINY, "epochs": 2, "batch_size": 32})
    recipe.train_recipe(cfg, ctx)
    steps = 2 * -(-cfg.train_limit // 32)
    assert len(touches) == steps and beat_file.exists()
