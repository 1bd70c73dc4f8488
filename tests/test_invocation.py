"""The invocation skeleton both engines share (harness/invocation.py): what a worker is handed on its
command line reaches it intact, and a parent run never stays RUNNING after a fault or an interrupt."""

import pytest

from harness.fields.config import parse_assignment
from harness.errors import StoreFault
from harness.invocation import Invocation, Stopped, set_arguments
from harness.launchers import WorkerRole
from harness.store import Outcome, Store
from harness.store.tracking import DESCRIPTION
from harness.studies import study_engine
from harness.specs import study_spec
from harness.specs import sweep_spec
from harness.sweeps.sweep_engine import run_sweep

LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


class _Recording:
    """A launcher that records the command lines and environments it is handed and runs none."""
    detach = False

    def __init__(self, cores: int = 3):
        self.cores, self.commands, self.envs = cores, [], []

    def cores_per_worker(self, workers):
        return self.cores

    def run(self, commands, envs, progress=None):
        self.commands, self.envs = commands, envs
        return [0] * len(commands)


def _given(command: list[str]) -> dict:
    """The overrides a worker's command line gives it, each `--set` parsed as the CLI parses it."""
    return dict(parse_assignment(command[i + 1]) for i, arg in enumerate(command) if arg == "--set")


def _stores(tmp_path):
    return Store(f"sqlite:///{tmp_path / 'mlflow.db'}"), f"sqlite:///{tmp_path / 'optuna.db'}"


def test_set_arguments_parse_back_to_the_same_lists_and_text():
    overrides = {"sparsity": [0.0, 0.5], "model": ["tiny_cnn", "lenet_d2l"], "dataset": "digits", "epochs": "3"}
    assert _given(set_arguments(overrides)) == overrides


def test_a_list_override_reaches_a_study_worker_intact(tmp_path):
    """Sweeps and studies build their workers' command lines in one place: a list goes as JSON,
    which the worker parses back to the same list (str() of a list of names is not JSON). A study's
    file takes single values only today; this is the worker protocol's promise for both kinds."""
    store, db_url = _stores(tmp_path)
    launcher = _Recording()
    run = Invocation("study", "trials", store, db_url, workers=2, launcher=launcher)
    run.open_experiment("lists")
    overrides = {"sparsity": [0.0, 0.5], "model": ["tiny_cnn", "lenet_d2l"], "epochs": "2"}
    codes = run.launch("study lists", ["study_lists.toml", "--scale", "smoke"], overrides, threads=2,
                       parent="PARENT", token="TOKEN", progress=None)
    assert codes == [0, 0] and len(launcher.commands) == 2
    for index, (command, env) in enumerate(zip(launcher.commands, launcher.envs)):
        assert command[3:7] == ["study", "study_lists.toml", "--scale", "smoke"]
        assert _given(command) == overrides
        assert WorkerRole.decode(command[command.index("--worker") + 1]) == WorkerRole(index, "TOKEN", "PARENT")
        assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
        assert env["MLFLOW_TRACKING_URI"] == store.uri and env["HARNESS_STORAGE"] == db_url


def test_study_workers_open_the_study_their_launcher_named(study_file, tmp_path):
    """A study whose trials would each take every core gives each worker a share (threads): the
    worker parses that back from its command line and must name the study as the launcher did (a
    digest of the overrides), or each worker would run a study of its own."""
    spec = study_spec.load(str(study_file("shared", space=LR, base={"threads": 0})))
    store, db_url = _stores(tmp_path)
    launcher = _Recording(cores=3)
    outcome = study_engine.run_study(spec, store, db_url, scale="full", overrides={"epochs": "1"}, workers=2,
                                     launcher=launcher, show_progress=False, out_dir=tmp_path, log=lambda line: None)
    assert len(launcher.commands) == 2
    for command, env in zip(launcher.commands, launcher.envs):
        given = _given(command)
        assert given == {"epochs": "1", "threads": "3"}
        assert spec.study_name("full", given) == outcome.study_name
        assert env["OMP_NUM_THREADS"] == "3"


def test_sweep_and_study_workers_run_the_same_worker_protocol(sweep_file, study_file, tmp_path):
    """One skeleton: both engines' workers get `harness KIND FILE --scale S ... --workers 1
    --no-progress --worker INDEX:TOKEN:PARENT` and the same environment keys."""
    store, db_url = _stores(tmp_path)
    sweep, study = _Recording(), _Recording()
    run_sweep(sweep_spec.load(str(sweep_file("protocol", {"sparsity": [0.0, 0.5]}))), store, scale="smoke",
              db_url=db_url, workers=2, launcher=sweep, show_progress=False)
    spec = study_spec.load(str(study_file("protocol", space=LR)))
    study_engine.run_study(spec, store, db_url, scale="smoke", overrides={}, workers=2, launcher=study,
                           show_progress=False, out_dir=tmp_path, log=lambda line: None)
    for kind, launcher in (("sweep", sweep), ("study", study)):
        assert [c[3] for c in launcher.commands] == [kind, kind]
        for index, command in enumerate(launcher.commands):
            assert command[command.index("--scale") + 1] == "smoke"
            assert command[-5:-1] == ["--workers", "1", "--no-progress", "--worker"]
            assert WorkerRole.decode(command[-1]).index == index
    assert [sorted(e) for e in sweep.envs] == [sorted(e) for e in study.envs]


@pytest.mark.parametrize("kind, unit", [("sweep", "cells"), ("study", "trials")])
def test_a_store_fault_closes_the_parent_failed_and_says_how_to_resume(kind, unit, tmp_path):
    store, db_url = _stores(tmp_path)
    run = Invocation(kind, unit, store, db_url)
    experiment_id = run.open_experiment(f"fault-{kind}")
    parent = store.start_run(experiment_id, "parent", {"harness.kind": kind})
    stopped = Stopped(f"stopped after 1 of 2 {unit}", f"interrupted after 1 of 2 {unit}", {"harness.cells_ok": 1})
    with pytest.raises(StoreFault) as raised:
        with run.as_parent(parent, lambda: stopped):
            raise StoreFault("the tracking store refused to log: disk full")
    assert str(raised.value).startswith(f"the tracking store refused to log: disk full; the {kind} stopped, "
                                        f"its finished {unit} are kept and the same command resumes it")
    record = next(r for r in store.runs(experiment_id) if r.run_id == parent)
    assert record.status != "RUNNING" and record.outcome == Outcome.FAILED
    assert record.reason == f"stopped after 1 of 2 {unit}: the tracking store refused to log: disk full"
    assert record.tags["harness.cells_ok"] == "1"


def test_an_interrupt_closes_the_parent_interrupted_with_how_far_it_got(tmp_path):
    store, db_url = _stores(tmp_path)
    run = Invocation("sweep", "cells", store, db_url)
    experiment_id = run.open_experiment("interrupted")
    parent = store.start_run(experiment_id, "parent", {"harness.kind": "sweep"})
    stopped = Stopped("stopped after 1 of 2 cells", "interrupted after 1 of 2 cells", {},
                      "what ran\n\n**Interrupted** after 1 of 2 cells.")
    with pytest.raises(KeyboardInterrupt):
        with run.as_parent(parent, lambda: stopped):
            raise KeyboardInterrupt
    record = next(r for r in store.runs(experiment_id) if r.run_id == parent)
    assert record.status == "KILLED" and record.outcome == Outcome.INTERRUPTED
    assert record.reason == "interrupted after 1 of 2 cells"
    assert record.tags[DESCRIPTION].endswith("**Interrupted** after 1 of 2 cells.")
