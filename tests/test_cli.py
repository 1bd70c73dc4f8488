"""The command line as a user meets it: one sentence and exit 2 for every mistake, no traceback."""

import subprocess
import sys

import pytest
from conftest import assert_one_sentence_exit_2

from harness.cli import main


def run_cli(*args, uri):
    return subprocess.run([sys.executable, "-m", "harness", *args, "--tracking-uri", uri],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('cli') / 'mlflow.db'}"


@pytest.mark.parametrize("args, words", [
    (["run", "nope"], ["experiment", "pruning"]),
    (["sweep", "nope"], ["unknown sweep 'nope'", "sparsity"]),
    (["run", "pruning", "--set", "colour=red"], ["unknown config key 'colour'"]),
    (["run", "pruning", "--set", "model=vgg"], ["model", "cnn"]),
    (["run", "pruning", "--set", "sparsity=1"], ["sparsity", "[0, 1)"]),
    (["run", "pruning", "--set", "epochs=0"], ["epochs", "positive"]),
    (["run", "pruning", "--set", "batch_size=0"], ["batch_size", "positive"]),
    (["run", "pruning", "--set", "lr=-1"], ["lr", "positive"]),
    (["run", "pruning", "--set", "pruning_backend=prune-o-matic"], ["pruning_backend", "nni"]),
    (["run", "pruning", "--set", "backend=nccl"],
     ["experiment 'pruning' does not read 'backend'; it reads: batch_size,", "sparsity", "pruning_backend"]),
    (["run", "async", "--set", "epochs=3"], ["experiment 'async' does not read 'epochs'", "matrix_size"]),
    (["sweep", "sparsity", "--set", "dtype=bf16"], ["does not read 'dtype'", "sparsity"]),
    (["run", "pruning", "--set", "dataset=imagefolder", "--set", "data_dir=/no/such/folder"],
     ["/no/such/folder", "train"]),
    (["sweep", "sparsity", "--scale", "enormous"], ["unknown scale 'enormous'", "smoke"]),
    (["report", "sparsity"], ["has not been run", "make sweep-sparsity"]),
    (["frobnicate"], ["unknown command 'frobnicate'", "choose one of run, sweep", "--help"]),
    (["sweep", "sparsty"], ["unknown sweep 'sparsty'", "did you mean 'sparsity'?"]),
    (["study", "lr_bach"], ["unknown study 'lr_bach'", "did you mean 'lr_batch'?"]),
    (["run", "pruning", "--set", "sparsty=0.5"], ["unknown config key 'sparsty'", "did you mean 'sparsity'?"]),
    (["sweep", "sparsity", "--scale", "smok"], ["unknown scale 'smok'", "did you mean 'smoke'?"]),
    (["study", "lr_batch", "--scale", "quik"], ["unknown scale 'quik'", "did you mean 'quick'?"]),
    (["sweep", "sparsity", "--scale", "smoke", "--set", "sparsty=[0.1,0.2]"],
     ["unknown config key 'sparsty'", "did you mean 'sparsity'?"]),
    (["study", "lr_batch", "--scale", "smoke", "--set", "optimiser=adam"],
     ["unknown config key 'optimiser'", "did you mean 'optimizer'?"]),
    (["sweep", "../no/such.toml"], ["../no/such.toml (= /", "no/such.toml)"]),
    (["run", "pruning", "--set", "dataset=imagefolder", "--set", "data_dir=../no/such"], ["../no/such (= /"]),
    (["run", "pruning", "--device", "tpu"], ["device", "cuda:N"]),
    (["ui", "--port", "70000"], ["--port must be between 1 and 65535", "70000"]),
])
def test_user_mistakes_end_in_one_sentence_and_exit_2(args, words, uri, capsys):
    assert_one_sentence_exit_2([*args, "--tracking-uri", uri], words, capsys)


def test_unreachable_tracking_server_is_named_without_its_password(capsys):
    assert main(["list", "--tracking-uri", "http://user:s3cret@127.0.0.1:9"]) == 0  # list needs no store
    assert main(["report", "sparsity", "--tracking-uri", "http://user:s3cret@127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the MLflow tracking server at http://user:***@127.0.0.1:9" in err
    assert "s3cret" not in err


def test_plain_file_store_is_refused_with_the_alternatives(capsys, tmp_path):
    assert main(["report", "sparsity", "--tracking-uri", str(tmp_path)]) == 2
    assert "sqlite:///" in capsys.readouterr().err


def test_tracking_uri_comes_from_the_environment(monkeypatch, tmp_path):
    from harness.store import resolve_tracking_uri as resolve_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/env.db")
    assert resolve_uri() == f"sqlite:///{tmp_path}/env.db"
    assert resolve_uri("sqlite:///x.db") == "sqlite:///x.db"


def test_no_traceback_reaches_the_user_from_a_real_process(uri):
    out = run_cli("run", "pruning", "--set", "sparsity=2", uri=uri)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0


def test_run_prints_and_logs_the_metrics(uri, capsys):
    assert main(["run", "pruning", "--set", "model=tiny_cnn", "--set", "dataset=synthetic",
                 "--set", "train_limit=128", "--set", "test_limit=64", "--set", "epochs=1",
                 "--set", "sparsity=0.5", "--set", "pruning_backend=torch-pruning", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "train_time_s" in out and "param_count" in out and "logged as run" in out


def test_cuda_on_a_machine_without_a_gpu_is_one_sentence(uri, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["run", "pruning", "--set", "device=cuda", "--set", "dataset=synthetic", "--tracking-uri", uri]) == 2
    assert "no usable CUDA GPU" in capsys.readouterr().err


def test_list_shows_every_experiment_with_the_title_from_its_descriptor(capsys):
    import experiments

    assert main(["list", "experiments"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the titles are wrapped to the terminal's width
    for name in experiments.names():
        assert f" {name} {' '.join(experiments.get(name).title.split())}" in out


@pytest.mark.parametrize("value, words", [
    ("sparsity=0.5,0.6", ["--set sparsity=0.5,0.6 is not one value", "--set sparsity=[0.5,0.6]"]),
    ("sparsity=[0.5,1.5]", ["cell 'sparsity=1.5'", "[0, 1)"]),
])
def test_a_bad_value_inside_a_grid_list_stops_the_sweep_before_any_run(value, words, tmp_path, capsys):
    from harness.store.tracking import Store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert_one_sentence_exit_2(["sweep", "sparsity", "--scale", "smoke", "--set", value, "--tracking-uri", uri],
                               words, capsys)
    store = Store(uri)
    experiment_id = store.find_experiment("sparsity")
    assert experiment_id is None or store.runs(experiment_id) == []  # no parent run, no failed cell


def test_the_readmes_relative_data_dir_is_shown_resolved_and_no_sweep_run_is_made(tmp_path, capsys, monkeypatch):
    """The README's `DATA_DIR=../shared/data/cifar10-jpeg`, on a machine without it: the sentence says
    where the relative path led, and the sweep makes neither a parent run nor a cell."""
    from harness.store.tracking import Store

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert_one_sentence_exit_2(["sweep", "sparsity", "--scale", "smoke", "--set", "dataset=imagefolder",
                                "--set", "data_dir=../shared/data/cifar10-jpeg", "--tracking-uri", uri],
                               [f"../shared/data/cifar10-jpeg (= {tmp_path.parent / 'shared/data/cifar10-jpeg'})"],
                               capsys)
    store = Store(uri)
    experiment_id = store.find_experiment("sparsity")
    assert experiment_id is None or store.runs(experiment_id) == []


def test_a_mistyped_key_of_a_sweep_file_gets_a_did_you_mean(sweep_file, tmp_path, capsys):
    path = sweep_file("typo", {"sparsity": [0.0]})
    path.write_text(path.read_text().replace("repeats = 1\n", "repeat = 3\n"))
    assert_one_sentence_exit_2(["sweep", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                               [f"sweep file {path}: unknown key 'repeat'; did you mean 'repeats'?"], capsys)


@pytest.mark.parametrize("target", ["ui", "dashboard"])
def test_make_ui_and_dashboard_take_port_and_the_store(target):
    from pathlib import Path

    store = "sqlite:////tmp/elsewhere/mlflow.db"
    dry = " ".join(subprocess.run(["make", "-n", target, "PORT=5123", f"TRACKING_URI={store}"],
                                  cwd=Path(__file__).parent.parent, capture_output=True, text=True,
                                  check=True).stdout.split())
    assert f"harness {target} --port 5123 " in dry and f"--tracking-uri {store}" in dry


def test_ui_on_a_port_in_use_is_one_sentence(uri, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        assert_one_sentence_exit_2(["ui", "--port", str(port), "--tracking-uri", uri],
                                   [f"port {port}", "already in use", "PORT="], capsys)


def test_ui_banner_opens_a_sweep_on_its_newest_cells_once_reported_in_the_model_training_view(store, sweep_file):
    from harness import ui_links
    from harness.cli.ui_server import _banner
    from harness.report import overview
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    spec = sweep_spec.load(str(sweep_file("bannered", {"sparsity": [0.0]})))
    run_sweep(spec, store, show_progress=False)
    experiment_id = store.find_experiment("bannered")

    def link() -> str:
        text = _banner(store, "http://127.0.0.1:5999")
        return next(line for line in text.splitlines() if line.split()[:1] == ["bannered"]).split()[1]

    # before any report (an older store, or a sweep whose report failed): the runs table
    assert link() == f"http://127.0.0.1:5999/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    overview.refresh(store, spec)   # what `harness sweep` and `harness report` do after the cells
    assert link() == (f"http://127.0.0.1:5999/#/experiments/{experiment_id}/runs?"
                      f"viewStateShareKey={ui_links.CELLS_VIEW}&workflowType=machine_learning")


# A KeyboardInterrupt caught after it passed through PyRun_String (as some extensions evaluate code)
# leaves CPython's "unhandled interrupt" flag set, and the interpreter would then end by SIGINT.
STALE_INTERRUPT = """
import ctypes, sys
import harness.cli as cli
evaluate = ctypes.pythonapi.PyRun_String
evaluate.restype, evaluate.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
def interrupted_main(argv=None):
    try:
        evaluate(b"raise KeyboardInterrupt", 257, {}, {})
    except KeyboardInterrupt:
        return cli.EXIT_INTERRUPTED
cli.main = interrupted_main
cli.entry()
"""


def test_an_interrupt_exits_130_even_after_it_passed_through_a_c_level_evaluation(tmp_path):
    (tmp_path / "stale_interrupt.py").write_text(STALE_INTERRUPT)
    done = subprocess.run([sys.executable, "-m", "stale_interrupt"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]


@pytest.mark.parametrize("experiment, sets, expected", [
    ("data_parallel", [], {"device": "cpu", "backend": "gloo"}),   # a GPU sweep as CPU processes
    ("dp_scratch", [], {"device": "cpu", "backend": "gloo"}),
    ("pruning", [], {"device": "cpu"}),                             # no backend to set: it would be refused
    ("data_parallel", ["backend=ccl"], {"device": "cpu", "backend": "ccl"}),  # a --set wins
])
def test_device_sets_the_backend_only_where_the_experiment_has_one(experiment, sets, expected):
    import argparse

    from harness.cli.commands import _overrides

    assert _overrides(argparse.Namespace(device="cpu", sets=sets), experiment) == expected
    on_gpus = {"device": "cuda", **({"backend": "nccl"} if "backend" in expected else {})}   # gloo there is refused
    assert _overrides(argparse.Namespace(device="cuda", sets=[]), experiment) == on_gpus


def test_make_device_cpu_passes_the_device_to_the_harness():
    from pathlib import Path

    dry = subprocess.run(["make", "-n", "sweep-gpus", "DEVICE=cpu", "SCALE=smoke"], cwd=Path(__file__).parent.parent,
                         capture_output=True, text=True, check=True).stdout
    assert "--device cpu" in dry and "backend" not in dry


def test_make_device_cuda_leaves_the_backend_to_the_experiment():
    """No list of DDP sweeps in the Makefile: DEVICE=cuda passes the device, and the harness sets nccl
    for the experiments that declare it (test_device_sets_the_backend_only_where_the_experiment_has_one)."""
    from pathlib import Path

    root = Path(__file__).parent.parent
    for sweep in ("gpus", "cpu-ddp", "sparsity"):
        dry = subprocess.run(["make", "-n", f"sweep-{sweep}", "DEVICE=cuda", "SCALE=smoke"], cwd=root,
                             capture_output=True, text=True, check=True).stdout
        assert "--device cuda" in dry and "backend" not in dry, dry
    assert "NCCL_SWEEPS" not in (root / "Makefile").read_text()


def test_the_store_locations_are_resolved_once_and_carried(monkeypatch, tmp_path):
    """The command line resolves the tracking URI and the shared database once (StoreLocations) and
    every use reads that pair: a change of the environment after it no longer moves the store. Outside
    harness/store/uris.py only the library's own defaults resolve (Store() and run_sweep() called
    without a location, as tests and scripts do)."""
    import argparse
    import re
    from pathlib import Path

    from harness.cli.commands import where

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'a.db'}")
    monkeypatch.delenv("HARNESS_STORAGE", raising=False)
    args = argparse.Namespace(tracking_uri=None, storage=None)
    first = where(args)
    assert (first.tracking_uri, first.db_url) == (f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'a-optuna.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'b.db'}")
    assert where(args) is first
    root = Path(__file__).parent.parent / "harness"
    resolving = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                       if re.search(r"\bresolve_(tracking_uri|db_url)\(", p.read_text()))
    assert resolving == ["store/tracking.py", "store/uris.py", "sweeps/sweep_engine.py"], resolving


@pytest.mark.parametrize("command", ["sweep", "study"])
def test_scale_help_names_every_scale_the_files_have_cpu_included(command, capsys):
    from harness.cli import main
    from harness.specs import study_spec, sweep_spec

    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())   # argparse wraps the help text
    specs = sweep_spec if command == "sweep" else study_spec
    scales = {scale for name in specs.available() for scale in specs.load(name).scales}
    assert "cpu" in scales and [s for s in sorted(scales) if s not in shown] == []
