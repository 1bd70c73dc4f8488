"""`make reproduce-cpu DATA_DIR=...` (`harness reproduce --scale cpu`): every sweep it plans has a `cpu`
scale that loads, validates and reads the real CIFAR-10 folders (the grey 28x28 stand-in where a table
used Fashion-MNIST); the cells 2 cores cannot hold stay in the grid as skips; failed sweeps do not stop
the others, a mistake does; and the target refuses to start without DATA_DIR, in one sentence. Nothing
here reads the real images: the plan is read, the sweeps are expanded, never run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import experiments
from harness.machine import hardware
from harness.distributed import placement
from harness.errors import CellSkipped, UserError
from harness.folders import REPO_ROOT
from harness.cli import reproduce
from harness.specs import sweep_spec

CIFAR_FOLDERS = {"imagefolder", "imagefolder_grey28"}   # real CIFAR-10 JPEGs, as RGB or in grey at 28x28
GPU_ONLY_EXPERIMENTS = {"autoparallel"}


def _make(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "TRACKING_URI", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


@pytest.fixture(scope="module")
def planned() -> tuple[list[str], set[str]]:
    """The sweeps reproduce-cpu runs, in order, and those it hands DATA_DIR."""
    out = _make("-n", "reproduce-cpu", "DATA_DIR=DATA", "HARNESS=harness")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^harness reproduce --scale cpu --data-dir DATA --out results/cpu-2core ", out.stdout, re.M)
    steps = reproduce.plan("cpu", "DATA")
    return [p.sweep for p in steps], {p.sweep for p in steps if p.data_dir == "DATA"}


def test_the_plan_is_in_the_documents_order(planned):
    names, _ = planned
    assert names[:6] == ["sparsity", "formats", "amp", "threads", "cpu-ddp", "gpus"]
    assert names.index("hybridize") < names.index("async") < names.index("dp-scratch") < names.index("resnet")


def test_failed_sweeps_do_not_stop_the_others_and_a_mistake_stops_them_all(monkeypatch, tmp_path, capsys):
    """The loop's exit statuses, with the sweeps and the report stood in for (their codes are made up)."""
    from harness.cli import main
    from harness.report import reproduction

    ran, written = [], []
    monkeypatch.setattr(reproduce, "plan", lambda scale, data, sweeps: [reproduce.Planned(n, None) for n in "abc"])
    monkeypatch.setattr(reproduction, "write_reproduction",
                        lambda store, out, sweeps: written.append(out) or (out / "REPRODUCTION.md", "made up"))
    store = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--out", str(tmp_path / "out")]
    codes = {"a": 1, "b": 0, "c": 0}
    commands = []

    def run(command, env):   # a stand-in for the sweep's process: its made-up exit status
        commands.append((command, env))
        ran.append(command[4])
        return codes[command[4]]

    monkeypatch.setattr(reproduce, "_run", run)
    assert main(["reproduce", "--data-dir", "D", *store]) == 1
    assert ran == ["a", "b", "c"] and len(written) == 1
    # The store each sweep writes to travels in its environment, never on its command line (`ps`).
    assert all("--tracking-uri" not in command and env["MLFLOW_TRACKING_URI"] == store[1] for command, env in commands)
    assert "reproduce: cells failed in a (each recorded" in capsys.readouterr().err
    ran.clear(), written.clear()
    codes["b"] = 2
    assert main(["reproduce", "--data-dir", "D", *store]) == 2
    assert ran == ["a", "b"] and written == []
    assert main(["reproduce", *store]) == 2
    assert capsys.readouterr().err.startswith("harness: error: harness reproduce needs --data-dir, the folder")
    ran.clear()
    codes["b"] = -9   # killed by a signal: it stops there, like an interrupt
    assert main(["reproduce", "--data-dir", "D", *store]) == 130
    assert ran == ["a", "b"] and written == []


def test_tables_runs_and_reports_those_sweeps_alone_in_the_documents_order():
    """A results folder holding some of the tables (measured on a host of its own): TABLES= reaches
    both the run and the page, the order is the documents', a sweep without the scale is a sentence."""
    for target in ("reproduce-cpu", "reproduce-cpu-report"):
        out = _make("-n", target, "DATA_DIR=DATA", "HARNESS=harness", "MACHINE=cpu-2core/data-parallel",
                    "TABLES=resnet-lr,dp-scratch")
        assert out.returncode == 0, out.stderr
        assert re.search(r"--out results/cpu-2core/data-parallel .*--sweeps resnet-lr,dp-scratch$", out.stdout, re.M)
    assert [p.sweep for p in reproduce.plan("cpu", "DATA", ["resnet-lr", "dp-scratch"])] == ["dp-scratch", "resnet-lr"]
    with pytest.raises(UserError, match=r"autoparallel has no \[scales.cpu\] table, so it cannot be reproduced"):
        reproduce.plan("cpu", "DATA", ["resnet", "autoparallel"])


@pytest.mark.parametrize("argv, said", [
    (["reproduce", "--data-dir", "D", "--sweeps", "resnt"], "resnt"),
    (["report", "--sweeps", " , "], "names no sweep"),
    (["report", "sparsity", "--sweeps", "resnet"], "takes a sweep or --sweeps, not both"),
    (["report", "--sweeps", "resnet,nope"], "nope"),
])
def test_a_mistaken_sweeps_list_is_one_sentence_before_any_run(argv, said, tmp_path, capsys):
    from harness.cli import main

    store = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    try:
        code = main([*argv, *store])
    except SystemExit as parser_exit:   # argparse's own usage error
        code = parser_exit.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()


def test_every_sweep_of_reproduce_cpu_has_a_cpu_scale_that_validates(planned):
    names, with_data = planned
    assert len(names) == len(set(names)) >= 12
    for name in names:
        spec = sweep_spec.load(name)
        assert "cpu" in spec.scales, f"sweep {name} has no [scales.cpu]"
        needs_data = experiments.get(spec.experiment).needs_dataset
        assert (name in with_data) == needs_data, f"{name}: DATA_DIR given {name in with_data}, needed {needs_data}"
        cells = sweep_spec.expand(spec, "cpu", {"data_dir": "DATA"} if needs_data else {})
        assert all(c.config is not None for c in cells), [c.error for c in cells if c.error]
        for cell in cells:  # a sweep whose grid varies the device (async) keeps its cuda row, a skip here
            assert cell.config.device == "cpu" or "device" in spec.axes(), f"{name} {cell.label}: {cell.config.device}"
            if needs_data:
                assert cell.config.dataset in CIFAR_FOLDERS and cell.config.data_dir == "DATA", (name, cell.label)


def test_every_sweep_file_with_a_cpu_scale_is_reproduced(planned):
    names, _ = planned
    with_cpu = [n for n in sweep_spec.available() if "cpu" in sweep_spec.load(n).scales]
    assert sorted(with_cpu) == sorted(names)


def test_a_sweep_left_out_of_reproduce_cpu_is_one_a_cpu_cannot_run(planned):
    """A new sweep file must be placed: given a cpu scale (that puts it in the plan), or be one of the
    GPU-only experiments (D12.3 queues work on GPUs; on a CPU there is nothing to overlap)."""
    names, _ = planned
    left_out = {n: sweep_spec.load(n).experiment for n in sweep_spec.available() if n not in names}
    assert all(experiment in GPU_ONLY_EXPERIMENTS for experiment in left_out.values()), left_out


def test_fashion_mnist_tables_use_grey_cifar_and_say_so(planned):
    names, _ = planned
    stand_ins = 0
    for name in names:
        spec = sweep_spec.load(name)
        if spec.base.get("dataset") != "fashion_mnist":
            continue
        stand_ins += 1
        assert spec.fixed("cpu")["dataset"] == "imagefolder_grey28", name
        notes = spec.report.get("notes", [])
        assert any(n.get("when") == {"dataset": "imagefolder_grey28"} and "Fashion-MNIST" in n["text"]
                   for n in notes), f"{name}: no report note says CIFAR-10 stands in for Fashion-MNIST"
    assert stand_ins == 5  # D12.5 and D12.6 with its three exercises


def test_cells_two_cores_cannot_hold_are_skips_and_the_rest_run(planned, monkeypatch):
    """On a 2-core machine a data-parallel cell either fits or is a skip with its reason (more
    threads or processes than cores, oneCCL missing, a backend for one process), and every such sweep
    keeps cells that run."""
    names, _ = planned
    monkeypatch.setattr(hardware, "usable_cores", lambda: [0, 1])
    monkeypatch.setattr(placement, "backend_problem",
                        lambda backend: "oneCCL bindings missing" if backend == "ccl" else None)
    for name in names:
        spec = sweep_spec.load(name)
        if spec.experiment not in ("data_parallel", "dp_scratch"):
            continue
        runs, skips = [], []
        for cell in sweep_spec.expand(spec, "cpu", {"data_dir": "DATA"}):
            try:
                placement.check_can_run(cell.config)
                runs.append(cell.label)
            except CellSkipped as err:
                skips.append((cell.label, str(err)))
        assert runs, f"{name}: no cpu-scale cell fits 2 cores ({skips[:2]})"
        for label, reason in skips:
            assert "cores" in reason or "oneCCL" in reason or "one process uses no" in reason, (name, label, reason)


@pytest.mark.parametrize("name, axis, full_only", [
    ("threads", "threads", [4, 8, 12, 16]),
    ("cpu-ddp", "world_size", [4, 8]),
    ("gpus", "world_size", [3, 4, 5, 6, 7, 8]),
])
def test_the_documents_axis_is_kept_so_the_report_shows_the_skips(name, axis, full_only):
    spec = sweep_spec.load(name)
    values = {getattr(c.config, axis) for c in sweep_spec.expand(spec, "cpu", {"data_dir": "DATA"})}
    assert set(full_only) <= values


def test_reproduce_cpu_without_data_dir_is_one_sentence():
    out = _make("reproduce-cpu")
    assert out.returncode == 2
    first = out.stderr.splitlines()[0]
    assert first.startswith("make reproduce-cpu needs DATA_DIR=") and first.endswith(").")
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_reproduce_cpu_stops_at_a_data_dir_without_the_images(tmp_path):
    """A folder that is not there is the harness's one sentence, said before any sweep starts (not
    repeated for every table) and before the store is made."""
    out = _make("reproduce-cpu", f"DATA_DIR={tmp_path / 'nowhere'}", f"HARNESS={sys.executable} -m harness",
                f"TRACKING_URI=sqlite:///{tmp_path / 'store' / 'mlflow.db'}", PYTHONPATH=str(REPO_ROOT))
    assert out.returncode == 2, out.stderr
    assert "needs class folders" in out.stderr and "Traceback" not in out.stderr
    assert "== reproduce: sweep" not in out.stdout and not (tmp_path / "store" / "mlflow.db").exists()
