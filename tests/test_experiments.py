"""Every registered experiment runs on its smoke config, returns the metrics it declares, and reads
exactly the config fields it declares (`reads`), so that refusing a field it never reads is safe."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import ClassVar

import pytest
import torch

import experiments
import experiments.autoparallel_exercises
from experiments import ALWAYS_ALLOWED, check_reads, metric_matches
from harness.config import FIELD_NAMES, RunConfig, make_config
from harness.errors import CellSkipped, UserError

NAMES = experiments.names()

# Fields an experiment reads only on a branch its smoke config does not take. Each entry must be in
# its `reads` and must stay unread by the smoke run, or the test fails (an entry can go stale).
OTHER_BRANCH_READS = {
    # world_size > 1: torchrun's rendezvous and the hang watchdog (one process reads the backend to
    # refuse one other than gloo, which it would not use)
    "data_parallel": {"node_rank", "rdzv_endpoint", "dist_timeout_s"},
    # dp_impl=ddp with world_size > 1 (the smoke runs the hand-written copies in one process)
    "dp_scratch": {"backend", "nnodes", "node_rank", "rdzv_endpoint", "dist_timeout_s"},
    # world_size > 1 (the smoke trains in one process); momentum with optimizer=sgd (the smoke uses adam)
    "recipe": {"node_rank", "rdzv_endpoint", "dist_timeout_s", "momentum"},
    # number_format=tf32 only: the GPU it is measured on (the smoke reads bf16 from torch.finfo)
    "formats": {"device"},
    # D12.3's exercises 2 and 3 (the smoke runs compute_copy)
    "autoparallel": {"autopar_streams", "autopar_cpu_size"},
}
# Declared metrics the smoke run cannot return, for the same reason.
OTHER_BRANCH_METRICS = {
    "data_parallel": {"peak_rss_mb"},            # the ranks' peak, when they are other processes
    "dp_scratch": {"rank{i}_train_time_s"},      # one per torchrun rank (dp_impl=ddp)
    "autoparallel": {"gpu0_time_s", "gpu1_time_s", "both_time_s",  # two_devices needs 2 GPUs
                     *experiments.autoparallel_exercises.METRICS},   # the exercises' cases
    "recipe": {"peak_rss_mb"},                   # the ranks' peak, when they are other processes
    "formats": {"probe_fp32_mantissa_bits"},     # tf32's probe, on an Ampere or newer GPU
}
# What a training run logs only when its peak was wrong (an MFU above 1) or its dtype has no peak.
MFU_EXCEPTIONS = {"mfu_invalid", "mfu_invalid_reason", "mfu_na"}


class RecordingConfig(RunConfig):
    """A RunConfig that notes every field read from it (`cfg.x` and `getattr(cfg, "x")` alike)."""

    read: ClassVar[set[str]] = set()

    def __getattribute__(self, name: str):
        if name in FIELD_NAMES:
            RecordingConfig.read.add(name)
        return super().__getattribute__(name)


def recording(values: dict) -> RecordingConfig:
    cfg = RecordingConfig.model_validate(make_config(values).model_dump())
    RecordingConfig.read.clear()  # the validators' cross-field checks are not the experiment's reads
    return cfg


@pytest.mark.parametrize("name", NAMES)
def test_each_experiment_runs_its_smoke_config_reading_and_returning_what_it_declares(name):
    experiment = experiments.get(name)
    cfg = recording({"experiment": name, **experiment.smoke})
    epochs = []
    try:
        result = experiment.run(cfg, lambda epoch, metrics: epochs.append(metrics))
    except CellSkipped as skipped:
        assert RecordingConfig.read <= experiment.reads, RecordingConfig.read - experiment.reads
        if name == "autoparallel" and not torch.cuda.is_available():
            pytest.skip(f"autoparallel needs a GPU: {skipped}")
        raise
    read = set(RecordingConfig.read)

    assert read <= experiment.reads, f"{name} read fields missing from its `reads`: {sorted(read - experiment.reads)}"
    never = experiment.reads - read
    assert never == OTHER_BRANCH_READS.get(name, set()), \
        f"{name} declares fields the smoke run never read: {sorted(never)}"

    numbers = {k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    texts = {k for k, v in result.items() if isinstance(v, str)}
    assert numbers | texts == set(result), f"{name} returned values that are neither numbers nor text"
    assert [k for k in numbers if not experiment.has_metric(k)] == []
    assert texts <= set(experiment.notes)
    unreturned = {m for m in experiment.metrics if not any(metric_matches(m, k) for k in numbers)}
    unreturned -= MFU_EXCEPTIONS
    assert unreturned == OTHER_BRANCH_METRICS.get(name, set()), f"{name} declares metrics it never returned"
    assert set(experiment.notes) - MFU_EXCEPTIONS <= texts
    if experiment.needs_dataset:  # the sweep shows an epoch bar for these: they report each epoch
        assert len(epochs) == cfg.epochs


@pytest.mark.parametrize("name", NAMES)
def test_each_module_exports_one_descriptor_under_its_registry_name(name):
    module = importlib.import_module(experiments.REGISTRY[name])
    experiment = experiments.get(name)
    assert experiment is module.EXPERIMENT and experiment.name == name and experiment.run is module.run
    assert not hasattr(module, "TRAINS") and not hasattr(module, "METRICS")  # the descriptor says it now
    assert experiment.title and experiment.clock
    assert experiment.reads <= set(FIELD_NAMES) and "experiment" not in experiment.smoke
    assert not set(experiment.metrics) & set(experiment.notes)
    check_reads(name, experiment.smoke)  # the smoke config sets nothing the experiment ignores


def test_a_field_the_experiment_never_reads_is_refused_naming_the_fields_it_reads():
    with pytest.raises(UserError) as err:
        check_reads("pruning", ["sparsity", "backend"])
    message = str(err.value)
    assert message.startswith("experiment 'pruning' does not read 'backend'; it reads: batch_size, data_dir,")
    assert "sparsity" in message and "\n" not in message and message.endswith(".")
    with pytest.raises(UserError, match="sweep file x.toml: experiment 'async' does not read 'epochs'"):
        check_reads("async", ["epochs"], where="sweep file x.toml")


def test_fields_every_cell_carries_are_allowed_for_every_experiment():
    assert ALWAYS_ALLOWED == {"experiment", "repeat", "threads"}
    for name in NAMES:
        check_reads(name, ALWAYS_ALLOWED)
    assert "threads" not in experiments.get("autoparallel").reads  # allowed there only as the worker split


def test_unknown_experiment_or_key_is_one_sentence_naming_what_exists():
    with pytest.raises(UserError, match="unknown experiment 'nope'; choose one of pruning, amp"):
        experiments.get("nope")
    with pytest.raises(UserError, match="unknown config key 'colour'"):
        check_reads("pruning", ["colour"])


def test_validating_an_experiment_name_imports_no_experiment_module():
    code = ("import sys; from harness.config import make_config; make_config({'experiment': 'amp'}); "
            "print(sorted(m for m in sys.modules if m.startswith('experiments.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
