"""Faults of processes (two sweeps at once, workers and launchers dying, signals, memory,
threads),
reproduced for real: each gives one sentence on stderr, the right exit status, no traceback,
and the store holds afterwards what it should. How the faults are made: tests/fault_helpers.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from harness.cli import main
from harness.machine.calibration import SPEED_INDEX, SPEED_LOAD
from harness.store.tracking import CELL_ID, OUTCOME, REASON, Store

from fault_helpers import LR_SPACE, all_runs, cells_and_parents, harness, tiny_sweep, visible_lines
from fault_helpers import uri  # noqa: F401 (fixtures)


# --- two ordinary sweeps at once on one store --------------------------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_sweeps_started_together_run_each_cell_once(tmp_path, uri):
    # The book's CNN on synthetic data: a second or two a cell, so the two commands overlap.
    path = tiny_sweep(tmp_path, "together", [0.0, 0.2, 0.4, 0.6], model="cnn", epochs=2)
    command = [sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-2000:]
        assert "locked" not in err and "Traceback" not in err, err[-2000:]
    cells, parents = cells_and_parents(uri)
    ids = [r.data.tags[CELL_ID] for r in cells]
    assert len(ids) == 4 and len(set(ids)) == 4, "a cell ran twice or not at all"
    assert all(r.info.status == "FINISHED" and r.data.tags[OUTCOME] == "ok" for r in cells)
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    ran = [out.count(" ok ") for out, _ in outputs]
    assert sum(ran) == 4, outputs  # each command ran some cells and found the others busy or done


# --- out of memory inside a cell: that cell fails with the reason, the sweep goes on ----------------------
@pytest.mark.slow
def test_out_of_memory_in_a_cell_records_it_failed_and_the_sweep_goes_on(tmp_path, uri):
    path = tmp_path / "oom.toml"
    path.write_text('name = "oom"\nexperiment = "async"\n[base]\nmatmul_iterations = 1\ntiming_repeats = 1\n'
                    "threads = 1\n[grid]\nmatrix_size = [64, 60000, 32]\n")  # 60000: a 14.4 GB matrix
    done = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress", memory_limit=12 << 30)
    assert done.returncode == 1, done.stderr[-2000:]  # some cell failed
    assert "Traceback" not in done.stderr and not visible_lines(done.stderr), done.stderr[-2000:]
    cells, parents = cells_and_parents(uri)
    by_size = {r.data.params["matrix_size"]: r for r in cells}
    assert by_size["60000"].info.status == "FAILED" and "allocate" in by_size["60000"].data.tags[REASON]
    assert by_size["64"].data.tags[OUTCOME] == by_size["32"].data.tags[OUTCOME] == "ok"  # before and after it
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["harness.cells_failed"] == "1"


# --- found by `make soak`: a study worker dying at the wrong moment -----------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_study_worker_killed_mid_trial_leaves_no_run_open_once_the_launcher_exits(study_file, tmp_path, uri):
    # 8 epochs: seconds a trial even on an idle machine, so a trial seen under a second after it
    # started is killed inside it.
    path = study_file("halfdead", space='lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n',
                      n_trials=4, base={"model": "cnn", "train_limit": 256, "epochs": 8})
    Store(uri)  # created first: MLflow's client polling a store still being created would migrate it too
    proc = subprocess.Popen([sys.executable, "-m", "harness", "study", str(path), "--workers", "2", "--tracking-uri",
                             uri, "--no-progress", "--out", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        deadline = time.time() + 240
        while killed is None:  # both workers inside a trial, then one of them dies
            assert proc.poll() is None and time.time() < deadline, "never saw two trials running at once"
            running = [r for r in cells_and_parents(uri)[0] if r.info.status == "RUNNING"]
            fresh = [r for r in running if time.time() * 1000 - r.info.start_time < 1000]
            if len({r.data.tags["harness.pid"] for r in running}) == 2 and fresh:
                killed = fresh[0]
                os.kill(int(killed.data.tags["harness.pid"]), 9)  # at once, inside the trial it just started
            else:
                time.sleep(0.1)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1  # a worker exited with an error: the launcher says so
    cells, parents = cells_and_parents(uri)
    assert not [r for r in cells + parents if r.info.status == "RUNNING"], "the dead worker's trial run stayed open"
    closed = next(r for r in cells if r.info.run_id == killed.info.run_id)
    assert closed.info.status == "KILLED" and closed.data.tags[OUTCOME] == "interrupted"


def test_a_slot_whose_worker_died_after_telling_optuna_is_not_run_again(study_file, tmp_path, uri):
    """The worker told Optuna its trial was complete and died before releasing the slot: whoever
    takes the slot over must count that trial, not run one more (the study would end with N+1)."""
    import optuna

    path = study_file("toldthendied", space='lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n',
                      n_trials=1, base={"epochs": 1})
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    dying = textwrap.dedent(f"""\
        import os, optuna
        from harness.store import Claims, Store
        from harness.studies import liveness, study_parent, study_storage
        from harness.specs import study_spec
        study = study_storage.open_study(study_spec.load({str(path)!r}), "toldthendied-full", {url!r}, create=True)
        store = Store({uri!r})  # the study's parent run, made before any trial as the engine makes it
        study_parent.parent_run(store, store.experiment_id("toldthendied"), "toldthendied-full", "full", {{}})
        claims = Claims({url!r})
        claims.claim("study:toldthendied-full", "slot-00000")
        trial = study.ask()
        trial.set_user_attr(liveness.OWNER_ATTR, f"{{claims.host}}|{{claims.pid}}|{{claims.pid_start:.2f}}|{{claims.owner}}")
        trial.set_user_attr(liveness.SLOT_ATTR, "slot-00000")
        study.tell(trial, 0.5)
        os._exit(0)  # dies here: the slot is never released
        """)
    subprocess.run([sys.executable, "-c", dying], check=True, capture_output=True, timeout=120)
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)]) == 0
    trials = optuna.load_study(study_name="toldthendied-full", storage=url).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"], "a finished slot was run again"


# --- `harness run` stopped by SIGTERM or Ctrl-C ------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_harness_run_closes_its_run_on_sigterm_and_sigint_with_its_own_sentence(signum, tmp_path, uri):
    import signal

    # Long enough (500 epochs of tiny cells) that the signal lands inside the run, however loaded the machine.
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "pruning", "--set", "model=tiny_cnn", "--set",
                             "dataset=synthetic", "--set", "train_limit=64", "--set", "test_limit=32", "--set",
                             "epochs=500", "--set", "pruning_backend=torch-pruning", "--set", "threads=1",
                             "--tracking-uri", uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not [r for r in all_runs(uri) if r.info.status == "RUNNING" and r.data.metrics]:
            assert proc.poll() is None and time.time() < deadline, "the run never started its epochs"
            time.sleep(0.1)
        proc.send_signal(getattr(signal, signum))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    line = visible_lines(err)[-1]
    assert line.startswith("harness: interrupted; the run is closed as interrupted") and "Traceback" not in err, err
    runs = all_runs(uri)
    assert len(runs) == 1 and runs[0].info.status == "KILLED" and runs[0].data.tags[OUTCOME] == "interrupted", \
        (err[-2000:], [(r.info.status, r.data.tags.get(OUTCOME)) for r in runs])


# --- more threads than cores ----------------------------------------------------------------------------
def test_more_threads_than_the_process_may_use_is_a_skip_with_the_reason(tmp_path, uri, capsys):
    cores = len(os.sched_getaffinity(0))
    path = tiny_sweep(tmp_path, "threads_beyond_cores", [0.0], epochs=1)
    path.write_text(path.read_text().replace("threads = 1\n", "") + f"threads = [1, {cores + 1}]\n")
    capsys.readouterr()
    assert main(["sweep", str(path), "--tracking-uri", uri, "--no-progress"]) == 0
    cells, _ = cells_and_parents(uri)
    by_threads = {r.data.params["threads"]: r for r in cells}
    assert by_threads["1"].data.tags[OUTCOME] == "ok"
    skipped = by_threads[str(cores + 1)]
    assert skipped.data.tags[OUTCOME] == "skipped" and set(skipped.data.metrics) <= {SPEED_INDEX, SPEED_LOAD}   # the calibration and the load around it only
    assert f"threads={cores + 1} is more than the {cores} core(s)" in skipped.data.tags[REASON]


# --- a study's workers, counted -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_workers_study_summary_counts_its_workers_trials(study_file, tmp_path, uri, capfd):
    path = study_file("counted", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    capfd.readouterr()  # the launcher here (its summary is what is tested), its workers real processes
    code = main(["study", str(path), "--workers", "2", "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)])
    said = capfd.readouterr()
    assert code == 0, said.err[-2000:]
    assert "study counted-full: ran 2 trial(s) (2 complete)" in said.out, said.out[-2000:]
    assert sorted(r.data.tags[OUTCOME] for r in cells_and_parents(uri)[0]) == ["ok", "ok"]


# --- the launcher SIGKILLed: its workers end too ----------------------------------------------------------
# tests/test_interrupts.py (test_a_sigkilled_launcher_takes_its_workers_with_it_and_the_same_command_finishes)
# kills a `--workers 2` launcher inside two cells, checks that its workers end, each closing its cell
# as interrupted, and that the same command then finishes the grid.
