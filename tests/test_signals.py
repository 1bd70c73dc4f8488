"""A stop signal is remembered: its KeyboardInterrupt, raised inside a finalizer (where Python would
print it as "Exception ignored" and drop it), is raised again before the next cell and after the
next epoch, and the lost one is not printed. A stop that comes twice (a SIGKILLed launcher's worker is sent
SIGTERM once per launcher thread that dies) does not cut the opening or the closing of a cell's run.
Run in a child process: a KeyboardInterrupt escaping here would stop pytest itself."""

import json
import subprocess
import sys
import time

import pytest

SWALLOWED = """
import os, signal, sys
from harness.signals import raise_if_stopped, sigterm_as_interrupt

class Freed:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100000):   # the handler runs here, inside __del__, and its exception is dropped
            pass

with sigterm_as_interrupt():
    Freed()
    print("went on past the signal", flush=True)
    try:
        raise_if_stopped()
    except KeyboardInterrupt as stop:
        print(f"raised again: {stop}", flush=True)
        sys.exit(0)
sys.exit(1)
"""


def test_a_stop_swallowed_by_a_finalizer_is_raised_again():
    done = subprocess.run([sys.executable, "-c", SWALLOWED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # the first KeyboardInterrupt was lost (the script went on), and not reported as a crash
    assert done.stdout.splitlines() == ["went on past the signal", "raised again: signal 15"]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_later_command_in_the_same_process_starts_without_the_old_stop():
    from harness import signals

    with signals.sigterm_as_interrupt():
        signals._stopped_by = "signal 15"
    signals.raise_if_stopped()   # nothing raised: the stop ended with its command


# One stop, sent twice, around one cell: the first SIGTERM after the cell's params, config and dataset
# are logged (where CI found a cell left RUNNING), the second where `at` says. Each lands at once: a
# signal a process sends itself is handled at its next bytecode.
TWICE = """
import json, os, signal, sys
from harness.cells import run_cell
from harness.specs.cell_spec import Cell
from harness.signals import sigterm_as_interrupt
from harness.store import Store

uri, at = sys.argv[1], sys.argv[2]
store = Store(uri)
experiment_id = store.experiment_id("stopped-twice")

def stop():
    os.kill(os.getpid(), signal.SIGTERM)

class StopAgain:
    '''The store's client, sending the stop again just after the call `at` names returns
    ("opening": create_run, the run exists and its id is not the caller's yet) or as the first
    call of the closing begins ("closing": the next thread of a SIGKILLed launcher dying).'''
    def __init__(self, client):
        self.client, self.armed = client, at == "opening"
    def __getattr__(self, name):
        method = getattr(self.client, name)
        def call(*args, **kwargs):
            if self.armed and at == "closing":
                self.armed = False
                stop()
            result = method(*args, **kwargs)
            if self.armed and name == "create_run":
                self.armed = False
                stop()
            return result
        return call if callable(method) else method

store._client = client = StopAgain(store._client)

def execute(experiment, cfg, on_epoch):
    client.armed = at == "closing"
    stop()
    for _ in range(10 ** 7):   # the handler raises in here
        pass
    raise AssertionError("the first SIGTERM raised nothing")

cell = Cell.build({"experiment": "pruning", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 64,
                   "test_limit": 32, "epochs": 2, "warmup_epochs": 0, "threads": 1,
                   "pruning_backend": "torch-pruning"}, "sparsity=0")
with sigterm_as_interrupt():
    try:
        run_cell(store, experiment_id, cell, tags={}, show_epochs=False, execute=execute)
    except KeyboardInterrupt:
        pass
store._client = client.client
print(json.dumps([(r.status, r.outcome, sorted(r.params)[:1]) for r in store.runs(experiment_id)]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("at", ["closing", "opening"])
def test_a_stop_sent_again_while_a_cell_run_is_opened_or_closed_leaves_it_closed(at, tmp_path):
    done = subprocess.run([sys.executable, "-c", TWICE, f"sqlite:///{tmp_path / 'mlflow.db'}", at],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])
    assert [status for status, _, _ in runs] == ["KILLED"], runs  # not RUNNING: closed, as interrupted
    assert runs[0][1] == "interrupted"
    assert bool(runs[0][2]) == (at == "closing"), runs  # cut after its params, or before any


# Why one stop comes twice: PR_SET_PDEATHSIG fires when the THREAD that started the worker ends, and
# again at each later handing-over to another thread, then to init. A launcher killed with SIGKILL ends
# thread by thread; here the starting thread ends first, then the whole launcher.
PER_THREAD = """
import os, subprocess, sys, threading, time
from harness.launchers.local import end_with_parent

COUNT = '''
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
print("ready", flush=True)
deadline = time.time() + 60
while len(got) < 2 and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1)   # a third would be counted too
open(sys.argv[1] + ".part", "w").write(str(len(got)))
os.replace(sys.argv[1] + ".part", sys.argv[1])   # whole, for the test that waits for it
'''
launcher, children = os.getpid(), []

def start():
    children.append(subprocess.Popen([sys.executable, "-c", COUNT, sys.argv[1]], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     preexec_fn=lambda: end_with_parent(launcher)))
    children[0].stdout.readline()   # its handler is in place

thread = threading.Thread(target=start)
thread.start()
thread.join()   # the thread that started the worker is gone: the first SIGTERM
time.sleep(1)
os._exit(0)     # the launcher is gone: the second
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_is_sent_sigterm_again_each_time_its_launcher_thread_dies(tmp_path):
    count = tmp_path / "sigterms"
    done = subprocess.run([sys.executable, "-c", PER_THREAD, str(count)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    deadline = time.time() + 90
    while not count.exists() and time.time() < deadline:   # the worker outlives the launcher by design
        time.sleep(0.2)
    assert count.read_text() == "2"


# A stop that lands inside a store write: the write finishes, and the stop is raised after it. Raised
# in the middle (inside SQLAlchemy's commit or its return of a connection), it could leave a SQLite
# write transaction open in this process, and the write closing the cut run then timed out behind it.
INSIDE_A_WRITE = """
import json, os, signal, sys
from harness.cells import run_cell
from harness.specs.cell_spec import Cell
from harness.signals import sigterm_as_interrupt
from harness.store import Store

store = Store(sys.argv[1])
experiment_id = store.experiment_id("stopped-in-a-write")
client = store._client._target   # MLflow's own, inside the harness's guard

class StopInsideTheEpochWrite:
    def __init__(self, client):
        self.client, self.armed = client, True
    def __getattr__(self, name):
        method = getattr(self.client, name)
        def call(*args, **kwargs):
            if name == "log_batch" and self.armed and kwargs.get("metrics") and kwargs["metrics"][0].step == 1:
                self.armed = False
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10 ** 6):   # the handler runs in here, inside the write
                    pass
            return method(*args, **kwargs)
        return call if callable(method) else method

store._client._target = StopInsideTheEpochWrite(client)

def execute(experiment, cfg, on_epoch):
    for epoch in range(5):
        on_epoch(epoch, {"train_loss": 1.0 / (epoch + 1)})
    raise AssertionError("the stop raised nothing")

cell = Cell.build({"experiment": "pruning", "model": "tiny_cnn", "dataset": "synthetic", "train_limit": 64,
                   "test_limit": 32, "epochs": 5, "warmup_epochs": 0, "threads": 1,
                   "pruning_backend": "torch-pruning"}, "sparsity=0")
with sigterm_as_interrupt():
    try:
        run_cell(store, experiment_id, cell, tags={}, show_epochs=False, execute=execute)
    except KeyboardInterrupt:
        pass
store._client._target = client
(run,) = store.runs(experiment_id)
steps = [m.step for m in client.get_metric_history(run.run_id, "train_loss")]
print(json.dumps([run.status, run.outcome, steps]))
"""


def test_a_stop_inside_a_store_write_lets_the_write_finish_and_closes_the_run(tmp_path):
    done = subprocess.run([sys.executable, "-c", INSIDE_A_WRITE, f"sqlite:///{tmp_path / 'mlflow.db'}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    status, outcome, steps = json.loads(done.stdout.splitlines()[-1])
    assert (status, outcome) == ("KILLED", "interrupted")
    assert sorted(steps) == [0, 1], steps   # epoch 1's write, cut by the stop, was stored whole; epoch 2 never ran
