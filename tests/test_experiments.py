"""Every registered experiment runs on its smoke config and returns the metrics it declares; its config
class holds the fields it reads, so refusing any other field is safe.

Reading a field its class lacks fails the run itself (pydantic raises AttributeError), so the smoke
run checks one direction on the branch it takes. The other direction, a class declaring a field
nothing reads, is checked on the source: every field must be named (`cfg.x`, `getattr(cfg, "x")`,
a "x" key) by the experiment's module or a training-half module it imports.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import experiments
from experiments import check_reads, make_config, metric_matches
from experiments.descriptors.autoparallel import EXERCISE_METRICS
from harness.fields.config import RunConfig
from harness.errors import CellSkipped, UserError
from harness.training import peak

NAMES = experiments.names()
ROOT = Path(__file__).resolve().parent.parent

# Declared metrics the smoke run cannot return: they come from a branch its smoke config does not take.
OTHER_BRANCH_METRICS = {
    "data_parallel": {"peak_rss_mb"},            # the ranks' peak, when they are other processes
    "dp_scratch": {"rank{i}_train_time_s"},      # one per torchrun rank (dp_impl=ddp)
    "autoparallel": {"gpu0_time_s", "gpu1_time_s", "both_time_s",  # two_devices needs 2 GPUs
                     *EXERCISE_METRICS},   # the exercises' cases
    "recipe": {"peak_rss_mb"},                   # the ranks' peak, when they are other processes
    "formats": {"probe_fp32_mantissa_bits"},     # tf32's probe, on an Ampere or newer GPU
}
# What a training run logs only when its peak was wrong (an MFU above 1) or its dtype has no peak.
MFU_EXCEPTIONS = {"mfu_invalid", "mfu_invalid_reason", "mfu_na"}
# What a timed run logs only when it gave up short of its target (give_up_after_s; a smoke config sets none).
ONLY_WHEN_GIVEN_UP = {"gave_up"}
# What a run whose dtype has no peak on this machine (bf16 on a CPU without AVX512-BF16 or AMX-BF16)
# does not log: `mfu_na` says why instead (harness/training/peak.py).
NO_PEAK = {"mfu", "peak_tflops", "peak_devices", "peak_key", "peak_measured"}
# Fields the harness reads for every cell, whatever the experiment: the name chooses the class,
# repeat tells identical cells apart (part of the cell id), malloc is applied by the cell runner
# (harness/cells.py run_here) and by each rank (harness/distributed/worker.py) before the run.
SET_BY_THE_HARNESS = {"experiment", "repeat", "malloc"}
# The orchestration half reads configs too, but not on an experiment's behalf.
NOT_RUN_BY_AN_EXPERIMENT = ("harness.cells", "harness.cli", "harness.launchers", "harness.report",
                            "harness.store", "harness.studies", "harness.sweeps")
DEFINE_THE_FIELDS = ("harness.fields.config", "harness.fields.field_groups", "experiments")


@pytest.mark.parametrize("name", NAMES)
def test_each_experiment_runs_its_smoke_config_returning_what_it_declares(name):
    experiment = experiments.get(name)
    cfg = make_config({"experiment": name, **experiment.smoke})
    assert type(cfg) is experiment.config
    epochs = []
    try:
        result = experiment.run(cfg, lambda epoch, metrics: epochs.append(metrics))
    except CellSkipped as skipped:
        if name == "autoparallel" and not torch.cuda.is_available():
            pytest.skip(f"autoparallel needs a GPU: {skipped}")
        raise

    numbers = {k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    texts = {k for k, v in result.items() if isinstance(v, str)}
    assert numbers | texts == set(result), f"{name} returned values that are neither numbers nor text"
    assert [k for k in numbers if not experiment.has_metric(k)] == []
    assert texts <= set(experiment.notes)
    unreturned = {m for m in experiment.metrics if not any(metric_matches(m, k) for k in numbers)}
    unreturned -= MFU_EXCEPTIONS | ONLY_WHEN_GIVEN_UP
    dtype = getattr(cfg, "dtype", None)
    no_peak = NO_PEAK if dtype and peak.unsupported(getattr(cfg, "device", "cpu"), dtype) else set()
    if no_peak:
        assert "mfu_na" in result, f"{name}: its {dtype} has no peak here, and no mfu_na says so"
    unreturned -= no_peak
    assert unreturned == OTHER_BRANCH_METRICS.get(name, set()), f"{name} declares metrics it never returned"
    assert set(experiment.notes) - MFU_EXCEPTIONS - no_peak <= texts
    if experiment.needs_dataset:  # the sweep shows an epoch bar for these: they report each epoch
        assert len(epochs) == cfg.epochs


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _reachable(module: str) -> set[str]:
    """The module and every training-half module it imports, at any depth (in functions too)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen or _module_file(current) is None or current.startswith(NOT_RUN_BY_AN_EXPERIMENT):
            continue
        seen.add(current)
        for node in ast.walk(ast.parse(_module_file(current).read_text())):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return {m for m in seen if m.startswith(("harness", "experiments"))}


def _names_read(module: str, skip_classes: set[str]) -> set[str]:
    """Attribute names and exact string constants in the module, leaving out the config class (its
    validators) and the EXPERIMENT descriptor (its smoke keys)."""
    tree = ast.parse(_module_file(module).read_text())
    kept = [node for node in tree.body
            if not (isinstance(node, ast.ClassDef) and node.name in skip_classes)
            and not (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EXPERIMENT" for t in node.targets))]
    names = set()
    for node in kept:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                names.add(sub.attr)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                names.add(sub.value)
    return names


@pytest.mark.parametrize("name", NAMES)
def test_each_field_of_an_experiments_class_is_read_by_code_its_run_can_reach(name):
    experiment = experiments.get(name)
    module = _run_module(name)
    reachable = _reachable(module) - set(DEFINE_THE_FIELDS)
    assert module in reachable
    # The config class and the field groups its descriptor declares define fields; their rules read none for run().
    defined = {experiment.config.__name__, *_groups_declared_in(experiment.config.__module__)}
    read = set().union(*(_names_read(m, defined) for m in reachable))
    unread = sorted(set(experiment.config.model_fields) - read - SET_BY_THE_HARNESS)
    assert unread == [], f"{name}'s config declares fields nothing it runs reads: {unread}"


def _groups_declared_in(module: str) -> set[str]:
    """The names of the field groups a descriptor declares beside its config class."""
    from harness.fields.config import FieldGroup

    return {name for name, value in vars(importlib.import_module(module)).items()
            if isinstance(value, type) and issubclass(value, FieldGroup) and value.__module__ == module}


def test_the_source_check_catches_a_declared_field_nothing_reads(tmp_path, monkeypatch):
    (tmp_path / "unread_field_experiment.py").write_text(
        "from harness.fields.config import RunConfig\n"
        "class UnreadConfig(RunConfig):\n"
        "    never_used_anywhere: int = 3\n"
        "def run(cfg, on_epoch=None):\n"
        "    return {'seed': float(cfg.seed)}\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    read = _names_read("unread_field_experiment", {"UnreadConfig"})
    assert "seed" in read and "never_used_anywhere" not in read


def _run_module(name: str) -> str:
    """The module holding the experiment's run (its descriptor names it)."""
    return experiments.get(name).run.target.partition(":")[0]


@pytest.mark.parametrize("name", NAMES)
def test_each_module_exports_one_descriptor_under_its_registry_name(name):
    module = importlib.import_module(experiments.registry()[name])
    experiment = experiments.get(name)
    run_module = importlib.import_module(_run_module(name))
    assert experiment is module.EXPERIMENT and experiment.name == name and experiment.run.resolve() is run_module.run
    assert not hasattr(run_module, "EXPERIMENT")   # one descriptor, in experiments/descriptors/
    assert not hasattr(module, "TRAINS") and not hasattr(module, "METRICS")  # the descriptor says it now
    assert experiment.title and experiment.clock
    assert issubclass(experiment.config, RunConfig) and experiment.reads == set(experiment.config.model_fields)
    assert "experiment" not in experiment.smoke
    assert not set(experiment.metrics) & set(experiment.notes)
    assert set(experiment.sense.values()) <= {"maximize", "minimize"}
    check_reads(name, experiment.smoke)  # the smoke config sets nothing the experiment ignores
    if experiment.needs_dataset:  # the dataset is loaded before any cell: at its model's shape, or its own
        assert "dataset" in experiment.reads and ("model" in experiment.reads or experiment.input_shape)


def test_a_field_the_experiment_never_reads_is_refused_naming_the_fields_it_reads():
    with pytest.raises(UserError) as err:
        check_reads("pruning", ["sparsity", "backend"])
    message = str(err.value)
    assert message.startswith("experiment 'pruning' does not read 'backend'; it reads: batch_size, check_every_samples, data_dir,")
    assert "sparsity" in message and "\n" not in message and message.endswith(".")
    with pytest.raises(UserError, match="sweep file x.toml: experiment 'async' does not read 'epochs'"):
        check_reads("async", ["epochs"], where="sweep file x.toml")
    with pytest.raises(UserError, match="experiment 'formats' does not read 'epochs'"):
        make_config({"experiment": "formats", "epochs": 3})  # building the config refuses it too


def test_fields_every_cell_carries_are_in_every_class():
    for name in NAMES:
        assert {"experiment", "repeat", "threads", "device", "seed"} <= experiments.get(name).reads
        check_reads(name, ["repeat", "threads"])


def test_unknown_experiment_or_key_is_one_sentence_naming_what_exists():
    with pytest.raises(UserError, match="unknown experiment 'nope'; choose one of airbench, amp, async"):
        experiments.get("nope")
    with pytest.raises(UserError, match="unknown config key 'colour'"):
        check_reads("pruning", ["colour"])
    with pytest.raises(UserError, match="did you mean 'sparsity'"):
        check_reads("amp", ["sparsty"])


def test_validating_a_config_imports_its_own_experiment_descriptor_only_and_no_torch():
    code = ("import sys; from experiments import make_config; make_config({'experiment': 'amp'}); "
            "print(sorted(m for m in sys.modules if m.startswith('experiments.') and m != 'experiments.descriptors'), "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['experiments.descriptors.amp'] False"


def test_starting_a_sweep_or_a_study_with_keys_its_experiment_reads_imports_that_experiment_only():
    """Reading a sweep file, expanding its cells with a --set value, reading a study file and its
    fixed settings ask no other experiment anything while every key is one the file's experiment
    reads; only a key it does not read imports them all (to tell another experiment's field from a
    typo), and the sentences are the ones they were."""
    code = ("import sys; from harness.specs import study_spec, sweep_spec; "
            "sweep_spec.expand(sweep_spec.load('sparsity'), 'smoke', {'epochs': 1}); "
            "study_spec.load('lr_batch').fixed('smoke', {'epochs': 1}); "
            "print(sorted(m for m in sys.modules if m.startswith('experiments.') and m != 'experiments.descriptors'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['experiments.descriptors.pruning']"

    from harness.specs import sweep_spec

    spec = sweep_spec.load("sparsity")
    with pytest.raises(UserError) as err:
        sweep_spec.expand(spec, "smoke", {"backend": "gloo"})   # another experiment's field
    assert str(err.value).startswith(f"sweep file {spec.shown}: experiment 'pruning' does not read 'backend'; it reads:")
    with pytest.raises(UserError) as err:
        sweep_spec.expand(spec, "smoke", {"epochs": 1, "sparsty": 0.5})
    assert str(err.value).startswith("unknown config key 'sparsty'; did you mean 'sparsity'")


def test_the_run_modules_a_fork_server_preloads_are_every_experiments_run():
    assert experiments.run_modules() == sorted({_run_module(name) for name in NAMES})
