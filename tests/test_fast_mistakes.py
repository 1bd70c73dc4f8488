"""A mistake is answered before anything heavy is loaded: each typical mistake of `make bench-cli`
(benchmarks/cli.py), run as `python -X importtime -m harness ...` in a fresh process, exits 2 with
one sentence, having imported neither torch nor MLflow nor Optuna and made no store; `harness list`
lists without them too. Not timed: what was imported is what decides the time, on any machine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from harness.folders import REPO_ROOT

_spec = importlib.util.spec_from_file_location("cli_bench", REPO_ROOT / "benchmarks" / "cli.py")
cli_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_bench)

HEAVY = ("torch", "mlflow", "optuna")


def _harness(tmp_path, *argv: str) -> tuple[int, list[str], set[str]]:
    """(exit status, stderr lines other than -X importtime's, top-level packages imported)."""
    env_store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *argv], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**_environment(), "MLFLOW_TRACKING_URI": env_store})
    timings = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    said = [line for line in done.stderr.splitlines() if line and not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in timings[1:]}
    return done.returncode, said, imported


def _environment() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.parametrize("label, argv", cli_bench.MISTAKES, ids=[label for label, _ in cli_bench.MISTAKES])
def test_each_mistake_is_one_sentence_and_exit_2_before_torch_mlflow_or_optuna_is_imported(tmp_path, label, argv):
    code, said, imported = _harness(tmp_path, *argv)
    assert code == 2, said
    assert len(said) == 1 and said[0].startswith("harness: error: "), said
    assert sorted(set(HEAVY) & imported) == [], f"{label}: imported {sorted(set(HEAVY) & imported)} first"
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()   # no store opened


def test_harness_list_lists_without_torch_mlflow_or_optuna(tmp_path):
    code, said, imported = _harness(tmp_path, "list")
    assert code == 0 and said == []
    assert sorted(set(HEAVY) & imported) == []


def test_the_benchmark_lists_a_dozen_mistakes_of_different_kinds():
    commands = {argv[0] for _, argv in cli_bench.MISTAKES}
    assert len(cli_bench.MISTAKES) >= 12 and {"sweep", "study", "run"} <= commands
