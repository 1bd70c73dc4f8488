"""A new experiment is two files in the project's layout, its run module (experiments/NAME.py) and
its descriptor (experiments/descriptors/NAME.py), plus its sweep file: a throwaway experiment written
so, into a temporary folder the two packages search beside their own, is found with no list edited
and without importing it, refuses a field it does not read, is swept end to end into a store and
reported beside its published figures, with no file of the project touched."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
from conftest import assert_one_sentence_exit_2

import experiments
from experiments import descriptors
from harness.cli import main
from harness.errors import UserError
from harness.report import checks, docs_tables, tables
from harness.specs import sweep_spec
from harness.store.tracking import Store

DESCRIPTOR = '''
"""Does a throwaway experiment come out as its sweep file expects?

The card of experiment `throwaway`; its code is experiments/throwaway.py.
- Fields: `ThrowawayConfig` below: `factor` and the `epochs`.
- Procedure: multiply (seed + 1) by `factor`, `epochs` times over.
- Metrics: `product`.
"""
from pydantic import Field

from experiments import Experiment, RunTarget
from harness.fields.config import RunConfig
from harness.fields.field_groups import EpochsFields


class ThrowawayConfig(RunConfig, EpochsFields):
    factor: float = Field(2.0, gt=0, description="What run multiplies (seed + 1) by.")


EXPERIMENT = Experiment(
    name="throwaway",
    title="a throwaway experiment",
    run=RunTarget("experiments.throwaway:run"),
    config=ThrowawayConfig,
    clock="no clock",
    needs_dataset=False,
    metrics=("product",),
    smoke={"factor": 3.0},
    sense={"product": "maximize"},
)
'''

RUN_MODULE = '''
"""The throwaway experiment's code: (seed + 1) x factor x epochs."""
from experiments.descriptors.throwaway import ThrowawayConfig


def run(cfg: ThrowawayConfig, on_epoch=None) -> dict[str, float]:
    return {"product": cfg.factor * (cfg.seed + 1) * cfg.epochs}
'''

SWEEP = """\
name = "throwaway"
title = "A throwaway experiment, swept"
source = "tests/test_new_experiment.py"
measures = "factor 1.5 and 2.5: the product"
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

[published]
rows = [{ factor = 1.5, product = 6.0 }, { factor = 2.5, product = 10.0 }]

[[checks]]
kind = "exact"
metric = "product"
where = { factor = 2.5 }
expected = 10.0
text = "factor 2.5 x (seed 1 + 1) x 2 epochs is 10"
"""

MODULES = ("experiments.throwaway", "experiments.descriptors.throwaway")


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A folder holding experiments' files in the project's layout (NAME.py, descriptors/NAME.py),
    searched by the experiments and descriptors packages after their own folders."""
    root = tmp_path / "lab"
    (root / "descriptors").mkdir(parents=True)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(root)])
    monkeypatch.setattr(descriptors, "__path__", [*descriptors.__path__, str(root / "descriptors")])
    yield root
    for module in MODULES:   # once the folder is gone from the paths, no test may still import from it
        sys.modules.pop(module, None)
        package, _, name = module.rpartition(".")
        vars(sys.modules[package]).pop(name, None)


@pytest.fixture
def throwaway(lab, tmp_path):
    """The throwaway experiment's two files, and its sweep file beside the folder."""
    (lab / "descriptors" / "throwaway.py").write_text(textwrap.dedent(DESCRIPTOR))
    (lab / "throwaway.py").write_text(textwrap.dedent(RUN_MODULE))
    importlib.invalidate_caches()
    sweep = tmp_path / "throwaway.toml"
    sweep.write_text(SWEEP)
    return sweep


def test_a_new_experiment_is_found_by_its_descriptors_file_without_importing_it(throwaway):
    assert "throwaway" in experiments.names()
    assert experiments.registry()["throwaway"] == "experiments.descriptors.throwaway"
    assert not set(MODULES) & set(sys.modules), "naming the experiments imported one"
    experiment = experiments.get("throwaway")
    run_module = importlib.import_module("experiments.throwaway")
    # the layout tests/test_experiments.py holds every experiment to: the run in its module, the descriptor apart
    assert experiment.run.resolve() is run_module.run and not hasattr(run_module, "EXPERIMENT")
    assert experiments.card("throwaway").startswith("Does a throwaway experiment come out as its sweep file expects?")
    row = next(r for r in docs_tables.experiments_table().split("\n") if r.startswith("| `throwaway` |"))
    assert row.startswith("| `throwaway` | `experiments/throwaway.py` |") and row.endswith("expects? |")


def test_a_new_experiment_is_its_two_files_and_its_sweep_file(throwaway, tmp_path):
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

    reports = tmp_path / "reports"
    assert main(["report", str(throwaway), "--scale", "smoke", "--tracking-uri", uri, "--out", str(reports)]) == 0
    page = (reports / "throwaway-smoke.md").read_text()
    assert "A throwaway experiment, swept" in page and "tests/test_new_experiment.py" in page
    (built,) = tables.build_all(store, sweep_spec.load(str(throwaway)), "smoke")
    assert [v.verdict for v in built.verdicts] == [checks.Judgement.PASS]   # 2.5 x (1 + 1) x 2 = 10, as published


def test_the_new_experiment_refuses_a_field_it_does_not_read(throwaway, capsys):
    assert_one_sentence_exit_2(["run", "throwaway", "--set", "lr=0.1"],
                               ["experiment 'throwaway' does not read 'lr'; it reads: device, epochs, factor"], capsys)
    assert_one_sentence_exit_2(["sweep", str(throwaway), "--set", "factr=2"],
                               ["unknown config key 'factr'", "did you mean 'factor'?"], capsys)
    assert_one_sentence_exit_2(["run", "throwaway", "--set", "factor=-1"],
                               ["config: key 'factor'", "greater than 0"], capsys)


def test_two_descriptors_of_one_name_are_refused_naming_both_files(lab):
    (lab / "descriptors" / "throwaway.py").write_text(textwrap.dedent(DESCRIPTOR))
    (lab / "descriptors" / "throwaway_again.py").write_text(textwrap.dedent(DESCRIPTOR))
    with pytest.raises(UserError) as err:
        experiments.names()
    message = str(err.value)
    assert message.startswith("two descriptors declare experiment 'throwaway': ")
    assert "throwaway.py and " in message and message.endswith("throwaway_again.py; give one of them another name.")


def test_a_descriptor_names_its_experiment_in_a_string_read_without_importing_it(tmp_path):
    computed = tmp_path / "computed.py"
    computed.write_text('NAME = "x"\nEXPERIMENT = Experiment(name=NAME)\n')
    with pytest.raises(UserError, match=r"computed\.py: write the experiment's name as a string"):
        descriptors.declared_name(computed)
    helper = tmp_path / "helper.py"
    helper.write_text('"""A module of the package that declares no experiment."""\nCONSTANT = 1\n')
    assert descriptors.declared_name(helper) is None
    typed = tmp_path / "typed.py"
    typed.write_text('EXPERIMENT: "Experiment" = Experiment(title="t", name="typed")\n')
    assert descriptors.declared_name(typed) == "typed"
