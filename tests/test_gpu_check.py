"""make gpu-check (benchmarks/gpu_check.py): it refuses anything that could download, reads each
sweep's outcomes back from the store, and (slow) runs end to end here, every GPU cell a skip."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from harness.specs import sweep_spec
from harness.folders import REPO_ROOT
from harness.store import Outcome
from harness.store.tracking import CELL_ID, SCALE, SWEEP

OK, FAILED, SKIPPED = Outcome.OK, Outcome.FAILED, Outcome.SKIPPED

_spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "benchmarks" / "gpu_check.py")
gpu_check = sys.modules["gpu_check"] = importlib.util.module_from_spec(_spec)  # a script, not a package
_spec.loader.exec_module(gpu_check)


def test_every_gpu_sweep_runs_offline_at_smoke_scale():
    expected = gpu_check._offline_cells()
    assert set(expected) == {s.name for s in gpu_check.SWEEPS}
    assert len(expected["gpus"][1]) == 6 and len(expected["amp"][1]) == 4   # fp32, bf16, fp16, and fp16 without a scaler


def test_a_sweep_that_would_download_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_check, "SWEEPS", [gpu_check.Sweep("sparsity", "T6.1", ["dataset=cifar10"])])
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu-check: error:") and "cifar10" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_the_sweep_line_comes_from_the_store(store, capsys):
    sweep = gpu_check.Sweep("gpus", "T10.2", [])
    spec = sweep_spec.load("gpus").model_copy(update={"name": "gpu-check-line"})  # its own MLflow experiment
    experiment = store.experiment_id(spec.name)
    tags = {SWEEP: spec.name, SCALE: "smoke"}
    parent = store.start_run(experiment, "parent", tags)
    cells = [("a", 1, OK, None, 8.0), ("b", 2, OK, None, 5.0), ("c", 4, SKIPPED, "no GPU", None),
             ("d", 8, SKIPPED, "no GPU", None), ("e", 2, FAILED, "CUDA out of memory", None)]
    for cell, world_size, outcome, reason, seconds in cells:
        run = store.start_run(experiment, cell, {**tags, CELL_ID: cell}, parent)
        store.log_params(run, {"world_size": world_size, "lr_scaling": "none" if cell != "e" else "linear"})
        metrics = {"train_time_s": seconds, "test_accuracy": 0.5, "final_lr": 0.1, "threads_used": 1} if seconds else {}
        store.end_run(run, outcome, reason, metrics=metrics)
    store.end_run(parent, OK)
    ok = gpu_check._summarise(store, sweep, spec, {"a", "b", "c", "d", "e", "f"}, exit_status=1)
    out = capsys.readouterr().out.splitlines()
    assert not ok
    assert "2 ok, 2 skipped (2x no GPU), 2 failed (" in out[0] and "CUDA out of memory" in out[0] and "not run" in out[0]
    assert "harness sweep" not in out[0]  # exit 1 is what failed cells give
    assert any("world_size=2 lr_scaling=none: 1.60x (published 1.80x)" in line for line in out[1:]), out


@pytest.mark.slow
def test_gpu_check_passes_here_with_every_gpu_cell_a_skip(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: make gpu-check runs the real thing")
    out = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "c")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line}
    for sweep in gpu_check.SWEEPS:
        assert " 0 ok, " in lines[sweep.name] and " 0 failed" in lines[sweep.name], lines[sweep.name]
        assert "no usable CUDA GPU" in lines[sweep.name] or "0 usable GPU" in lines[sweep.name]
    assert (tmp_path / "c" / "REPRODUCTION.md").exists()
    logs = tmp_path / "c" / "logs"  # the sweeps and the report ran in one process, each with its own log
    ran = json.loads((logs / f"{gpu_check.ONE_PROCESS}.results.json").read_text())
    assert set(ran) == {*(sweep.name for sweep in gpu_check.SWEEPS), gpu_check.REPORT}, ran
    assert all((logs / f"{sweep.name}.log").stat().st_size for sweep in gpu_check.SWEEPS)
    assert "gpu timings: no CUDA GPU here; nothing to time" in out.stdout


def test_without_a_gpu_the_sweeps_run_one_after_another_in_one_process(tmp_path, capfd):
    """The runner gpu-check starts where there is no GPU: each command's output in its own log, its
    exit status recorded, a failing one not stopping the next; one it never reached is named."""
    logs = tmp_path / "logs"
    logs.mkdir()
    plan = logs / f"{gpu_check.ONE_PROCESS}.json"
    runs = {"missing": ["sweep", "no_such_sweep", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
            "help": ["--help"]}
    plan.write_text(json.dumps({"logs": str(logs), "runs": runs}))
    capfd.readouterr()
    assert gpu_check.run_in_one_process(str(plan)) == 0
    assert capfd.readouterr() == ("", "")  # everything went to the logs
    missing = (logs / "missing.log").read_text()
    assert "harness: error:" in missing and "no_such_sweep" in missing, missing
    assert "usage: harness" in (logs / "help.log").read_text()
    stopped = "stopped after 9 s: the budget was spent"
    found = gpu_check._one_process_results(tmp_path, ["missing", "help", "never"], stopped)
    assert found["missing"][0] == 2 and found["help"][0] == 0  # the failing first did not stop the second
    assert found["never"] == (stopped, 0.0)
    # A stop when the budget was spent: the run it cut (exit 130) is given the stop's reason.
    (logs / f"{gpu_check.ONE_PROCESS}.results.json").write_text(json.dumps({"help": [0, 1.0], "cut": [130, 2.0]}))
    found = gpu_check._one_process_results(tmp_path, ["help", "cut"], stopped)
    assert found == {"help": (0, 1.0), "cut": (stopped, 2.0)}
