"""make bench-noise (benchmarks/noise.py): its statistics on fabricated A/A runs whose noise is
known, so the figures it prints for this machine mean what its docstring says."""

from __future__ import annotations

import importlib.util

import numpy as np

from harness.folders import REPO_ROOT

_spec = importlib.util.spec_from_file_location("noise_bench", REPO_ROOT / "benchmarks" / "noise.py")
noise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noise)


def _arms(cv: float, rounds: int = 10, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return 20 * np.exp(rng.normal(0, cv, rounds)), 20 * np.exp(rng.normal(0, cv, rounds))


def test_identical_arms_are_never_called_faster_and_any_effect_is_detected():
    a = 20 + 0.01 * np.arange(10)     # both arms the same runs: no noise between them at all
    rng = np.random.default_rng(0)
    assert noise.false_faster_rate(a, a.copy(), 5, rng) == 0.0
    assert noise.detectable_effect(a, a.copy(), 5, rng) == noise.EFFECTS[0]


def test_the_detectable_effect_grows_with_the_noise_and_shrinks_with_more_rounds():
    rng = np.random.default_rng(0)
    quiet, loud = noise.detectable_effect(*_arms(0.01), 5, rng), noise.detectable_effect(*_arms(0.08), 5, rng)
    assert quiet is not None and quiet < 0.05
    assert loud is None or loud > 2 * quiet
    assert noise.detectable_effect(*_arms(0.03), 5, rng) <= noise.detectable_effect(*_arms(0.03), 3, rng)


def test_the_false_faster_rate_stays_near_its_nominal_level_on_pure_noise():
    rng = np.random.default_rng(0)
    assert noise.false_faster_rate(*_arms(0.05, rounds=20), 5, rng) <= 0.10


def test_each_clock_gets_its_own_figures():
    figures = noise.clock_figures("epoch_time_median_s", *_arms(0.02), 10)
    assert set(figures) == {"cv", "paired_ratio_cv", "mde_n3", "false_faster_n3", "mde_n5", "false_faster_n5"}
    assert 0 < figures["cv"] < 0.1


def test_each_variant_starts_its_runs_with_its_own_environment_prefix_and_values(monkeypatch):
    seen = []

    class Done:
        stdout = 'RESULT {"train_time_s": 1.0, "epoch_time_median_s": 0.1}\n'
        stderr = ""

    def fake_run(command, **kwargs):
        seen.append((command, kwargs["env"], noise.json.loads(command[-3])))
        return Done()

    monkeypatch.setattr(noise.subprocess, "run", fake_run)
    for variant in ("harness", "keep-freed", "keep-freed-env", "pinned", "aslr-off"):
        assert noise.run_cell({"epochs": 1}, variant) == {"train_time_s": 1.0, "epoch_time_median_s": 0.1}
    (plain, plain_env, plain_cfg), (_, _, kept_cfg), (_, env_env, env_cfg), (_, pinned_env, _), (aslr, _, _) = seen
    assert "malloc" not in plain_cfg and "MALLOC_MMAP_MAX_" not in plain_env
    assert kept_cfg["malloc"] == "keep_freed" and "malloc" not in env_cfg
    assert env_env["MALLOC_MMAP_MAX_"] == "0" and int(env_env["MALLOC_TRIM_THRESHOLD_"]) > 2**30
    assert pinned_env["OMP_PROC_BIND"] == "true"
    assert aslr[:3] == ["setarch", noise.platform.machine(), "-R"] and aslr[3] == plain[0]
    assert "run_here" in noise.RUN_ONE   # each run is a cell as a sweep runs it: the malloc field applied


def test_an_unknown_variant_is_one_sentence_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(noise.sys, "argv", ["noise.py", "--variants", "harness,fast"])
    assert noise.main() == 2
    err = capsys.readouterr().err
    assert "unknown variant(s) fast" in err and len(err.strip().splitlines()) == 1


def test_the_calibrated_variant_divides_each_run_by_its_own_process_speed(monkeypatch, tmp_path):
    """Two processes twice as fast as two others: their times halve, their speed_index doubles, and the
    time x speed_index clock is the same for all four (the process's speed divided out)."""
    results = iter([(10.0, 2.0), (20.0, 1.0), (20.0, 1.0), (10.0, 2.0)])   # round k: A then B

    class Done:
        stderr = ""

        def __init__(self, env):
            time, speed = next(results)
            found = {"train_time_s": time, "epoch_time_median_s": time / 10}
            if env.get("BENCH_NOISE_CALIBRATE"):
                found["speed_index"] = speed
            self.stdout = "RESULT " + noise.json.dumps(found) + "\n"

    monkeypatch.setattr(noise.subprocess, "run", lambda command, **kwargs: Done(kwargs["env"]))
    out = tmp_path / "noise.json"
    monkeypatch.setattr(noise.sys, "argv", ["noise.py", "--rounds", "2", "--epochs", "1", "--variants", "calibrated",
                                            "--json", str(out)])
    assert noise.main() == 0
    figures = noise.json.loads(out.read_text())["calibrated"]
    assert figures["train_time_s"]["paired_ratio_cv"] > 0.5
    assert figures["train_time_s x speed_index"]["cv"] == 0 == figures["train_time_s x speed_index"]["paired_ratio_cv"]
