"""The sweep engine against a real SQLite MLflow store, on the tiny CNN and synthetic data."""

import dataclasses

import pytest
from conftest import assert_one_sentence_exit_2

import experiments.descriptors.pruning
from harness.specs import sweep_spec
from harness.errors import UserError
from harness.sweeps.sweep_engine import run_sweep
from harness.store.tracking import CELL_ID, OUTCOME, REASON
from conftest import mlflow_client


def _cells(store, name):
    return store.sweep_runs(store.find_experiment(name), name)


def test_every_cell_is_a_child_run_with_params_metrics_tags_and_config(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("logged", {"sparsity": [0.0, 0.5]})))
    result = run_sweep(spec, store, show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok"]
    runs = _cells(store, "logged")
    assert len(runs) == 2
    run = next(r for r in runs if r.params["sparsity"] == "0.5")
    assert run.tags["mlflow.parentRunId"] == result.parent_run_id
    assert run.name == "sparsity=0.5"
    for key in ("experiment", "model", "dataset", "epochs", "batch_size", "lr", "sparsity", "seed",
                "device", "threads", "pruning_backend", "weight_decay", "repeat"):
        assert key in run.params
    # Params are the fields pruning reads (the compare view's rows), which are its config class's.
    # experiment, repeat and threads too
    assert set(run.params) == set(experiments.descriptors.pruning.PruningConfig.model_fields)
    for key in ("train_time_s", "test_accuracy", "param_count", "samples_per_s", "peak_rss_mb", "epoch_time_s"):
        assert key in run.metrics
    assert 0.0 <= run.metrics["test_accuracy"] <= 1.0
    assert run.metrics["param_count"] < run.metrics["param_count_before"]
    for key in (CELL_ID, "git.commit", "git.dirty", "torch.version", "torch.cuda", "cpu.model", "cpu.cores",
                "gpu.names", "host", "harness.clock"):
        assert run.tags.get(key), key
    history = mlflow_client(store).get_metric_history(run.run_id, "epoch_time_s")
    assert [m.step for m in history] == [0, 1]
    assert sum(m.value for m in history) == pytest.approx(run.metrics["train_time_s"])
    config = mlflow_client(store).download_artifacts(run.run_id, "config.json")
    config_text = open(config).read()
    # the whole resolved config: its class's fields, no other experiment's
    assert '"sparsity": 0.5' in config_text and '"pretrain_epochs": 1' in config_text and "world_size" not in config_text


def test_running_again_reuses_finished_cells_and_records_nothing_twice(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("again", {"sparsity": [0.0, 0.3]})))
    first = run_sweep(spec, store, show_progress=False)
    second = run_sweep(spec, store, show_progress=False)
    assert [r.outcome for r in second.results] == ["reused", "reused"]
    assert [r.run_id for r in second.results] == [r.run_id for r in first.results]
    assert len(_cells(store, "again")) == 2
    # Nothing ran, so no new parent run: the result names the one that holds the cells.
    parents = store.sweep_runs(store.find_experiment("again"), "again", parents=True)
    assert [p.run_id for p in parents] == [first.parent_run_id] == [second.parent_run_id]
    # An extra axis value runs only the new cell.
    third = run_sweep(spec, store, overrides={"sparsity": [0.0, 0.3, 0.6]}, show_progress=False)
    assert [r.outcome for r in third.results] == ["reused", "reused", "ok"]
    assert len(_cells(store, "again")) == 3


def test_a_bad_value_in_the_grid_stops_the_sweep_before_any_run(store, sweep_file):
    # A cell recorded as failed for a value no run could take would sit in every later report.
    spec = sweep_spec.load(str(sweep_file("badcell", {"sparsity": [0.0, 1.5, 0.5]})))
    with pytest.raises(UserError, match=r"cell 'sparsity=1\.5'.*\[0, 1\)"):
        run_sweep(spec, store, show_progress=False)
    assert store.find_experiment("badcell") is None  # nothing created: no parent, no cell


def test_a_crashing_cell_is_rerun_next_time_and_replaces_its_record(store, sweep_file, monkeypatch):
    spec = sweep_spec.load(str(sweep_file("crash", {"sparsity": [0.0, 0.5]})))
    real = experiments.descriptors.pruning.EXPERIMENT

    def flaky(cfg, on_epoch=None):
        if cfg.sparsity == 0.5:
            raise RuntimeError("out of memory (simulated)")
        return real.run(cfg, on_epoch)

    monkeypatch.setattr(experiments.descriptors.pruning, "EXPERIMENT", dataclasses.replace(real, run=flaky))
    first = run_sweep(spec, store, show_progress=False)
    assert [r.outcome for r in first.results] == ["ok", "failed"]
    assert "RuntimeError: out of memory" in first.results[1].reason
    monkeypatch.setattr(experiments.descriptors.pruning, "EXPERIMENT", real)
    second = run_sweep(spec, store, show_progress=False)
    assert [r.outcome for r in second.results] == ["reused", "ok"]
    runs = _cells(store, "crash")
    assert len(runs) == 2 and {r.tags[OUTCOME] for r in runs} == {"ok"}


def test_a_run_left_running_by_a_dead_process_is_closed(store, sweep_file):
    spec = sweep_spec.load(str(sweep_file("stale", {"sparsity": [0.0]})))
    exp_id = store.experiment_id("stale")
    cell = sweep_spec.expand(spec)[0]
    tags = {"harness.sweep": "stale", "harness.scale": "full"}
    dead = {"harness.pid": "999999999"}  # no such process
    parent = store.start_run(exp_id, "stale (full)", tags)
    orphan = store.start_run(exp_id, cell.label, {**tags, CELL_ID: cell.cell_id}, parent)
    for run_id in (parent, orphan):
        store.set_tags(run_id, dead)
    result = run_sweep(spec, store, show_progress=False)
    assert result.results[0].outcome == "ok"
    assert mlflow_client(store).get_run(parent).info.status == "KILLED"
    assert mlflow_client(store).get_run(orphan).info.lifecycle_stage == "deleted"
    assert mlflow_client(store).get_run(orphan).info.status == "KILLED"


def test_repeats_expand_and_scales_override(sweep_file):
    spec = sweep_spec.load(str(sweep_file("rep", {"sparsity": [0.0, 0.5]}, repeats=3)))
    cells = sweep_spec.expand(spec, "smoke")
    assert len(cells) == 6 and len({c.cell_id for c in cells}) == 6
    assert {c.config.epochs for c in cells} == {1}
    # in rounds (A B, A B, A B), never A A A B B B: drift of the machine spreads over every point
    assert [c.label for c in cells[:3]] == ["sparsity=0.0 r0", "sparsity=0.5 r0", "sparsity=0.0 r1"]
    assert [c.config.repeat for c in cells] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(UserError, match="unknown scale 'huge'"):
        sweep_spec.expand(spec, "huge")
    with pytest.raises(UserError, match="epochs"):
        sweep_spec.expand(spec, "full", {"epochs": 0})


def test_one_sweep_command_reads_its_settings_once_and_expands_its_grid_once(sweep_file, tmp_path, monkeypatch):
    """`harness sweep` builds one job (harness/specs/sweep_job.py) and carries it from the command line
    to the engine: its --set values are read once, and its grid is expanded, each cell's config built
    and validated, once before the first cell runs (the size check, the data-folder check and the
    engine each expanded it before). --until-decided reads the same job."""
    from harness.cli import commands, main
    from harness.specs.cell_spec import Cell
    from harness.sweeps import sweep_engine

    expanded, built, settings_read, before_first_cell = [], [], [], []
    real_expand, real_build = sweep_spec.expand, Cell.build.__func__
    real_overrides, real_run_cell = commands._overrides, sweep_engine.run_cell

    def expand(spec, scale="full", overrides=None, repeats=None):
        expanded.append(overrides)
        return real_expand(spec, scale, overrides, repeats)

    def overrides(args, experiment):
        settings_read.append(experiment)
        return real_overrides(args, experiment)

    def run_cell(*args, **kwargs):
        if not before_first_cell:
            before_first_cell.append((list(expanded), len(built)))
        return real_run_cell(*args, **kwargs)

    monkeypatch.setattr(sweep_spec, "expand", expand)
    monkeypatch.setattr(Cell, "build", classmethod(lambda cls, *a, **k: built.append(a) or real_build(cls, *a, **k)))
    monkeypatch.setattr(commands, "_overrides", overrides)
    monkeypatch.setattr(sweep_engine, "run_cell", run_cell)
    path = sweep_file("expanded_once", {"sparsity": [0.0, 0.5]})
    assert main(["sweep", str(path), "--scale", "smoke", "--set", "lr=0.02", "--until-decided", "--no-progress",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    assert before_first_cell == [([{"lr": "0.02"}], 2)]   # one expansion, its two cells validated once each
    # After the cells only the report reads the grid again: the file's own points, without the --set values.
    assert [given for given in expanded if given] == [{"lr": "0.02"}]
    assert settings_read == ["pruning"]


@pytest.mark.parametrize("grid, base", [
    ({"sparsity": [0.0], "backend": ["gloo", "nccl"]}, None),  # a grid axis
    ({"sparsity": [0.0]}, {"backend": "nccl"}),                  # [base]
])
def test_a_sweep_file_setting_a_field_its_experiment_never_reads_is_one_sentence(sweep_file, grid, base, capsys):
    path = sweep_file("ignored", grid, base=base)
    assert_one_sentence_exit_2(["sweep", str(path)], [f"sweep file {path}: experiment 'pruning' does not read "
                                                      "'backend'; it reads:", "sparsity"], capsys)


def test_a_scale_setting_a_field_its_experiment_never_reads_is_refused(sweep_file):
    path = sweep_file("ignored_scale", {"sparsity": [0.0]})
    path.write_text(path.read_text().replace("[scales.smoke]\nepochs = 1\n", "[scales.smoke]\nmatrix_size = 8\n"))
    with pytest.raises(UserError, match=f"sweep file {path}: experiment 'pruning' does not read 'matrix_size'"):
        sweep_spec.load(str(path))


@pytest.mark.parametrize("name", sweep_spec.available())
@pytest.mark.parametrize("scale", sweep_spec.SCALES)
def test_shipped_sweeps_expand_to_valid_cells_at_every_scale(name, scale):
    cells = sweep_spec.expand(sweep_spec.load(name), scale)
    assert cells and all(c.config is not None for c in cells), [c.error for c in cells]
