import subprocess
import sys

import pytest

import experiments
from experiments import make_config
from harness.fields.config import parse_assignment
from harness.errors import UserError


def test_defaults_are_the_books_pruning_settings():
    cfg = make_config({})
    assert (cfg.experiment, cfg.model, cfg.dataset, cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.epochs,
            cfg.warmup_epochs) == ("pruning", "cnn", "cifar10", 64, 1e-5, 0.005, 10, 1)
    assert type(cfg) is experiments.get("pruning").config


@pytest.mark.parametrize("values, words", [
    ({"sparsity": 1.0}, ["sparsity", "[0, 1)"]),
    ({"sparsity": -0.1}, ["sparsity", "[0, 1)"]),
    ({"epochs": 0}, ["epochs", "positive"]),
    ({"batch_size": -4}, ["batch_size", "positive"]),
    ({"lr": 0}, ["lr", "positive"]),
    ({"model": "resnet9000"}, ["model", "cnn"]),
    ({"experiment": "nope"}, ["experiment", "pruning"]),
    ({"dataset": "imagenet"}, ["dataset", "cifar10"]),
    ({"pruning_backend": "magic"}, ["pruning_backend", "nni", "torch-pruning"]),
    ({"device": "tpu"}, ["device", "cuda:N"]),
    ({"colour": "red"}, ["unknown config key 'colour'", "sparsity"]),
    ({"epochs": "ten"}, ["epochs", "integer"]),
    ({"world_size": 2}, ["experiment 'pruning' does not read 'world_size'; it reads: batch_size,"]),
    ({"experiment": "async", "matrix_size": 0}, ["matrix_size", "positive"]),
    ({"experiment": "data_parallel", "world_size": 3, "nnodes": 2}, ["world_size 3", "multiple of nnodes 2"]),
    ({"experiment": "recipe", "batch_size": 10, "world_size": 4, "batch_is_global": True}, ["divide evenly"]),
    ({"experiment": "airbench", "airbench_epochs": 2.5, "epochs": 2}, ["set epochs = 3"]),
    ({"experiment": "amp", "target_from_epoch": 3, "epochs": 2}, ["past the last of 2 epochs"]),
])
def test_each_mistake_is_one_sentence_naming_field_and_what_is_accepted(values, words):
    with pytest.raises(UserError) as err:
        make_config(values)
    message = str(err.value)
    assert "\n" not in message and message.endswith(".")
    for word in words:
        assert word in message


def test_strings_from_the_command_line_are_coerced():
    cfg = make_config({"lr": "1e-3", "epochs": "3", "sparsity": "0.5"})
    assert (cfg.lr, cfg.epochs, cfg.sparsity) == (1e-3, 3, 0.5)


def test_cell_id_depends_on_what_is_measured_only():
    a = make_config({"sparsity": 0.5, "lr": "1e-3"})
    b = make_config({"lr": 0.001, "sparsity": 0.5})
    c = make_config({"sparsity": 0.6, "lr": 0.001})
    assert a.cell_id() == b.cell_id() != c.cell_id()
    assert make_config({"repeat": 1}).cell_id() != make_config({}).cell_id()
    # the experiment is part of the id even where its class has nothing else to tell
    assert make_config({"experiment": "formats"}).cell_id() != make_config({"experiment": "async"}).cell_id()


def test_parse_assignment():
    assert parse_assignment("lr=0.1") == ("lr", "0.1")
    assert parse_assignment("sparsity=[0.1, 0.5]") == ("sparsity", [0.1, 0.5])
    for bad in ("lr", "=3", "sparsity=[0.1,", "lr=inf"):
        with pytest.raises(UserError):
            parse_assignment(bad)
    with pytest.raises(UserError, match="unknown config key 'nope'"):  # whether it is a field: the registry's
        experiments.check_keys([parse_assignment("nope=1")[0]])


def test_a_new_measurement_procedure_gives_every_cell_a_new_id(monkeypatch):
    # Records made by the old procedure (warm-up epochs kept) must not count as finished cells.
    from harness.fields import config
    cfg = make_config({"epochs": 3})
    now = cfg.cell_id()
    monkeypatch.setattr(config, "MEASUREMENT_PROCEDURE", 1)
    assert cfg.cell_id() != now


def test_the_config_module_imports_no_experiment():
    code = ("import sys, harness.fields.config, harness.fields.field_groups; "
            "print(sorted(m for m in sys.modules if 'experiments' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_one_field_is_the_same_field_in_every_class_that_has_it():
    """Same name, same default, type and description: one MLflow param means one thing."""
    seen = {}
    for name in experiments.names():
        for key, info in experiments.get(name).config.model_fields.items():
            if key in seen:
                assert (info.default, info.annotation, info.description) == seen[key], (name, key)
            seen[key] = (info.default, info.annotation, info.description)
    assert set(seen) == set(experiments.all_fields())


def _field_groups():
    """The shared groups (harness/fields/field_groups.py) and those one experiment alone reads,
    declared in its descriptor beside its config class."""
    import importlib
    import inspect

    from harness.fields import field_groups
    from harness.fields.config import FieldGroup, RunConfig

    descriptors = [importlib.import_module(experiments.get(name).config.__module__) for name in experiments.names()]
    return [cls for module in (field_groups, *descriptors) for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, FieldGroup) and not issubclass(cls, RunConfig) and cls is not FieldGroup
            and cls.__module__ == module.__name__]


def _fields_its_rules_read(group) -> set[str]:
    """The `self.NAME` a group's own validators read."""
    import ast
    import inspect
    import textwrap

    read = set()
    for name, member in vars(group).items():
        function = getattr(member, "__func__", member)
        if callable(function) and name.startswith("_") and not name.startswith("__"):
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
            read |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                     and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return read


@pytest.mark.parametrize("group", _field_groups(), ids=lambda g: g.__name__)
def test_each_field_group_composed_alone_validates(group):
    """A group whose rule reads another group's field inherits that group, so a config made of the
    group alone has every field its rules read: validated with its defaults and with each switch
    turned on, it gives a value or a sentence, never an AttributeError."""
    from pydantic import ValidationError

    from harness.fields.config import RunConfig

    alone = type(f"Only{group.__name__}", (RunConfig, group), {})
    assert _fields_its_rules_read(group) <= set(alone.model_fields), "a rule reads a field its group lacks"
    switches = [name for name, f in group.model_fields.items() if f.annotation is bool]
    for values in [{}, *({name: True} for name in switches), {"target_from_epoch": 1}, {"world_size": 2}]:
        values = {k: v for k, v in values.items() if k in alone.model_fields}
        try:
            alone.model_validate(values)
        except ValidationError:
            pass   # a rule's sentence (pretrained on a model without weights): what a user would read


def test_an_experiment_declares_its_collective_backend_for_each_device():
    """--device (make's DEVICE) sets the backend the experiment declares for that device: gloo on a
    CPU, nccl on GPUs, for every experiment whose config has a backend; none for the others."""
    import argparse

    from harness.cli.commands import _overrides

    for name in experiments.names():
        experiment = experiments.get(name)
        if "backend" in experiment.reads:
            assert experiment.backend_for("cpu") == "gloo" and experiment.backend_for("cuda:1") == "nccl", name
            for device, backend in (("cuda", "nccl"), ("cpu", "gloo")):
                assert _overrides(argparse.Namespace(device=device, sets=[]), name) == {"device": device,
                                                                                         "backend": backend}
            given = argparse.Namespace(device="cuda", sets=["backend=gloo"])
            assert _overrides(given, name)["backend"] == "gloo", "a --set wins"
        else:
            assert experiment.backend_for("cuda") is None
            assert _overrides(argparse.Namespace(device="cuda", sets=[]), name) == {"device": "cuda"}


def test_the_lr_a_cell_trains_with_is_worked_out_in_one_place():
    """field_groups.lr_effective is the one rule: recipe's tuned and batch-scaled lr, data_parallel's
    lr scaled by the ranks (the rate its schedule ramps to), the others' lr as given, and None for an
    experiment without one. It is a metric the cell runner logs, never a field: cell ids stay."""
    from harness.distributed.ddp_train import LrSchedule
    from harness.training.train import lr_effective

    recipe = make_config({"experiment": "recipe", "lr": 0.005, "lr_factor": 2.0, "batch_size": 64, "lr_base_batch": 32})
    assert lr_effective(recipe) == 0.005 * 2.0 * 64 / 32
    assert lr_effective(recipe, world_size=2) == 0.005 * 2.0 * 128 / 32   # each rank's batch, twice over
    ddp = make_config({"experiment": "data_parallel", "lr": 0.1, "world_size": 4, "lr_scaling": "linear_warmup"})
    assert lr_effective(ddp) == LrSchedule(ddp, 4, steps_per_epoch=10).target == 0.1 * 4
    assert lr_effective(make_config({"experiment": "pruning", "lr": 0.003})) == 0.003
    assert lr_effective(make_config({"experiment": "hybridize"})) is None
    assert "lr_effective" not in type(recipe).model_fields
