"""Study trials in fresh processes (harness/studies/isolation.py, harness/launchers/forkserver.py):
a trial run in the study's process starts in the state the one before it left (threads, the graphs
torch.compile built); a trial forked from the clean server starts in the same state every time."""

import os
import signal
import textwrap
import time

import optuna
import pytest

from harness.cli import main
from harness.store.tracking import PARENT, Store
from conftest import mlflow_client

STATE = ("state_threads", "state_interop_threads", "state_compiled_graphs", "state_os_threads",
         "state_flush_denormal", "state_flush_denormal_pool", "state_allocator_returns_memory")


def _study(folder, name, *, isolation=None, n_trials=2, extra=""):
    """Every trial compiled (dynamo only, no C++ build) on one thread, timed: the state a compiled
    trial leaves is there for the next one to find."""
    text = textwrap.dedent(f"""\
        name = "{name}"
        experiment = "recipe"
        metric = "train_time_s"
        direction = "minimize"
        n_trials = {n_trials}
        """) + (f'isolation = "{isolation}"\n' if isolation else "") + extra + textwrap.dedent("""
        [space]
        lr = { type = "float", low = 1e-3, high = 1e-2, log = true }
        [sampler]
        name = "random"
        seed = 0
        [base]
        model = "tiny_cnn"
        dataset = "digits"
        train_limit = 128
        test_limit = 64
        epochs = 1
        batch_size = 32
        optimizer = "adam"
        execution = "compile"
        compile_backend = "eager"
        threads = 1
        device = "cpu"
        """)
    path = folder / f"study_{name}.toml"
    path.write_text(text)
    return path


def _trials(path, folder):
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    code = main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(folder / "reports")])
    store = Store(uri)
    client = mlflow_client(store)
    exp = client.get_experiment_by_name(path.stem.removeprefix("study_"))
    runs = [r for r in client.search_runs([exp.experiment_id]) if PARENT in r.data.tags]
    return code, sorted(runs, key=lambda r: r.info.start_time)


@pytest.mark.multiprocess
def test_a_compiled_trial_leaves_its_state_in_process_and_isolated_trials_all_start_the_same(tmp_path):
    shared, fresh = tmp_path / "none", tmp_path / "process"
    shared.mkdir(), fresh.mkdir()

    code, runs = _trials(_study(shared, "leak_none", isolation="none"), shared)
    assert code == 0 and len(runs) == 2
    first, second = (r.data.metrics for r in runs)
    # the first trial's graphs are still in the process (this test process may have compiled before)
    assert second["state_compiled_graphs"] > first["state_compiled_graphs"]
    if first["state_threads"] != 1:                # (a 1-core machine starts at 1 thread anyway)
        assert second["state_threads"] == 1        # the first trial's thread count, left behind

    code, runs = _trials(_study(fresh, "leak_process"), fresh)   # a timed objective: isolated by default
    assert code == 0 and len(runs) == 2
    states = [{k: r.data.metrics[k] for k in STATE} for r in runs]
    assert states[0] == states[1]
    assert states[0]["state_compiled_graphs"] == 0
    assert all(r.data.metrics["train_time_s"] > 0 and r.data.tags["harness.outcome"] == "ok" for r in runs)


@pytest.mark.multiprocess
def test_an_isolated_trial_is_pruned_by_the_study_process(tmp_path):
    extra = '[pruner]\nname = "threshold"\nupper = 1e-9\nmetric = "epoch_time_s"\n'   # every epoch is slower
    path = _study(tmp_path, "prune_process", isolation="process", n_trials=1, extra=extra)
    path.write_text(path.read_text().replace("epochs = 1\n", "epochs = 3\n"))
    code, runs = _trials(path, tmp_path)
    assert code == 0 and len(runs) == 1
    assert runs[0].data.tags["harness.outcome"] == "pruned"
    study = optuna.load_study(study_name="prune_process-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state.name for t in study.trials] == ["PRUNED"]
    assert len(study.trials[0].intermediate_values) == 1   # told after the first epoch, stopped there


def test_isolation_defaults_to_process_for_a_clocked_objective_and_a_bad_value_is_one_sentence(tmp_path, capsys):
    from harness.specs import study_spec

    assert study_spec.load("speed_recipe").trial_isolation == "process"
    assert study_spec.load(str(_study(tmp_path, "timed"))).trial_isolation == "process"
    assert study_spec.load(str(_study(tmp_path, "off", isolation="none"))).trial_isolation == "none"
    untimed = _study(tmp_path, "accuracy")
    untimed.write_text(untimed.read_text().replace('"train_time_s"', '"test_accuracy"').replace('"minimize"', '"maximize"'))
    assert study_spec.load(str(untimed)).trial_isolation == "none"
    bad = _study(tmp_path, "bad", isolation="thread")
    assert main(["study", str(bad), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "isolation" in err and "\n" not in err


@pytest.mark.multiprocess
def test_a_trial_process_dies_with_its_fork_server(tmp_path):
    from experiments import make_config
    from harness.launchers.forkserver import ForkServer
    from harness.studies.isolation import CHILD, PRELOAD

    cfg = make_config({"experiment": "recipe", "model": "tiny_cnn", "dataset": "digits", "epochs": 10_000,
                       "threads": 1, "device": "cpu"})
    server = ForkServer(PRELOAD)
    try:
        child = server.start(CHILD, {"config": cfg.model_dump(mode="json")})
        time.sleep(1.0)
        os.kill(server.proc.pid, signal.SIGKILL)   # the server dies (its worker was killed, say)
        server.proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.2)
        assert not _alive(child), "the trial's process outlived its fork server"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        os.close(server.channel.read_fd)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"   # a zombie has ended
    except FileNotFoundError:
        return False
