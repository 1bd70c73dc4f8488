"""A new experiment is its module, one registry line and its sweep file: a throwaway experiment
written to a temporary folder is registered, refused fields it does not read, and swept end to end
into a store, with no other file of the project touched."""

from __future__ import annotations

import textwrap

import pytest
from conftest import assert_one_sentence_exit_2

import experiments
from harness.cli import main
from harness.store.tracking import Store

MODULE = '''
"""A throwaway experiment: multiplies (seed + 1) by its own factor, epochs times."""
from pydantic import Field

from experiments import Experiment
from harness.fields.config import RunConfig
from harness.fields.field_groups import EpochsFields


class ThrowawayConfig(RunConfig, EpochsFields):
    factor: float = Field(2.0, gt=0, description="What run multiplies (seed + 1) by.")


def run(cfg: ThrowawayConfig, on_epoch=None) -> dict[str, float]:
    return {"product": cfg.factor * (cfg.seed + 1) * cfg.epochs}


EXPERIMENT = Experiment(
    name="throwaway",
    title="a throwaway experiment",
    run=run,
    config=ThrowawayConfig,
    clock="no clock",
    needs_dataset=False,
    metrics=("product",),
    smoke={"factor": 3.0},
    sense={"product": "maximize"},
)
'''

SWEEP = """\
name = "throwaway"
title = "A throwaway experiment, swept"
experiment = "throwaway"
repeats = 1

[base]
epochs = 2

[grid]
factor = [1.5, 2.5]

[scales.smoke]
seed = 1

[report]
x = "factor"
metrics = ["product"]
"""


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """The module in a folder of its own on the path, and its one registry line."""
    (tmp_path / "throwaway_experiment.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(experiments.REGISTRY, "throwaway", "throwaway_experiment")
    sweep = tmp_path / "throwaway.toml"
    sweep.write_text(SWEEP)
    return sweep


def test_a_new_experiment_is_its_module_one_registry_line_and_its_sweep_file(throwaway, tmp_path):
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    assert main(["sweep", str(throwaway), "--scale", "smoke", "--tracking-uri", uri, "--no-progress"]) == 0

    store = Store(uri)
    runs = store.sweep_runs(store.find_experiment("throwaway"), "throwaway")
    assert sorted(r.metrics["product"] for r in runs) == [6.0, 10.0]   # factor x (seed 1 + 1) x 2 epochs
    assert {r.params["factor"] for r in runs} == {"1.5", "2.5"}
    # its params are its class's fields, as for any experiment: nothing of another experiment's
    assert set(runs[0].params) == {"experiment", "device", "threads", "seed", "repeat", "malloc", "epochs", "factor"}
    assert "factor" in dict((n, d) for n, d, _ in experiments.field_help())


def test_the_new_experiment_refuses_a_field_it_does_not_read(throwaway, capsys):
    assert_one_sentence_exit_2(["run", "throwaway", "--set", "lr=0.1"],
                               ["experiment 'throwaway' does not read 'lr'; it reads: device, epochs, factor"], capsys)
    assert_one_sentence_exit_2(["sweep", str(throwaway), "--set", "factr=2"],
                               ["unknown config key 'factr'", "did you mean 'factor'?"], capsys)
    assert_one_sentence_exit_2(["run", "throwaway", "--set", "factor=-1"],
                               ["config: key 'factor'", "greater than 0"], capsys)
