"""MLflow's own records of a cell: its dataset input (the UI's Dataset column) and, when asked,
MLflow's sampled system metrics."""

import numpy as np
from conftest import mlflow_client

from experiments import make_config
from harness.training.dataset_record import describe
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep


def test_every_training_cell_logs_its_dataset_and_system_metrics_when_asked(store, sweep_file, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.02")  # a tiny cell outlives a few samples
    spec = sweep_spec.load(str(sweep_file("records", {"sparsity": [0.0]}, base={"train_limit": 1024, "epochs": 3})))
    spec.system_metrics = True
    result = run_sweep(spec, store, show_progress=False)
    run = mlflow_client(store).get_run(result.results[0].run_id)
    (given,) = run.inputs.dataset_inputs
    assert given.dataset.name == "synthetic" and len(given.dataset.digest) == 16
    assert '"train_samples": 1024' in given.dataset.profile and '"test_samples": 128' in given.dataset.profile
    assert {t.key: t.value for t in given.tags}["mlflow.data.context"] == "training"
    assert given.dataset.digest == describe(make_config({**spec.fixed("full"), "sparsity": 0.0})).digest
    assert "system/cpu_utilization_percentage" in run.data.metrics, sorted(run.data.metrics)

    spec.system_metrics = False  # off: no system/ metric
    off = run_sweep(spec, store, overrides={"sparsity": [0.5]}, show_progress=False)
    assert not [k for k in mlflow_client(store).get_run(off.results[0].run_id).data.metrics if k.startswith("system/")]


def test_the_digest_changes_with_the_data_and_only_with_them(tmp_path):
    from PIL import Image

    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(np.full((8, 8, 3), 40 * i + (label == "b") * 100, np.uint8)).save(folder / f"{i}.png")
    cfg = make_config({"dataset": "imagefolder", "data_dir": str(tmp_path), "model": "tiny_cnn"})
    first = describe(cfg)
    assert first.source_is_path and first.source == str(tmp_path.resolve()) and first.train_samples == 4
    assert describe(cfg).digest == first.digest
    assert describe(make_config({**cfg.model_dump(), "train_limit": 2})).digest != first.digest  # another subset
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "train" / "a" / "2.png")
    from harness.training import dataset_record

    dataset_record._describe.cache_clear()
    assert describe(cfg).digest != first.digest and describe(cfg).train_samples == 5
    synthetic = make_config({"dataset": "synthetic", "model": "tiny_cnn", "train_limit": 64, "test_limit": 32})
    assert describe(synthetic).digest != describe(make_config({**synthetic.model_dump(), "seed": 1})).digest


def test_workers_get_the_command_lines_system_metrics_choice(store, sweep_file):
    """The workers read the sweep file again; a --system-metrics given on the command line goes with them."""
    class Recording:
        detach = False
        commands: list = []

        def cores_per_worker(self, workers):
            return 1

        def run(self, commands, envs, progress=None):
            self.commands.extend(commands)
            return [0] * len(commands)

    spec = sweep_spec.load(str(sweep_file("forwarded", {"sparsity": [0.0]})))
    spec.system_metrics = True
    launcher = Recording()
    run_sweep(spec, store, workers=2, launcher=launcher, show_progress=False)
    assert launcher.commands and all("--system-metrics" in c for c in launcher.commands)


def test_system_metrics_are_on_by_default_only_where_a_gpu_is(sweep_file, monkeypatch):
    """Unset in the file and on the command line: on where a CUDA GPU is (was it busy?), off elsewhere."""
    from harness.machine import hardware

    spec = sweep_spec.load(str(sweep_file("defaulted", {"sparsity": [0.0]})))
    assert spec.system_metrics is None
    for gpus, on in ((0, False), (1, True)):
        monkeypatch.setattr(hardware, "gpu_count", lambda: gpus)
        assert spec.system_metrics_on() is on
    spec.system_metrics = False   # the file's (or --no-system-metrics') choice wins
    assert spec.system_metrics_on() is False
