"""Faults a new user met on a busy machine, each reproduced for real: the answer is one sentence
and the status a user's mistake gets (2), or the work goes on where the fault was only the
machine being slow."""

from __future__ import annotations

from pathlib import Path

from harness.cli import main


def one_sentence(capsys, argv: list[str], code: int, *words: str) -> str:
    capsys.readouterr()
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [shown for line in err.split("\n") if (shown := line.split("\r")[-1]).strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: ") and "Traceback" not in err, err[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def image_folder(root: Path, per_class: int = 2) -> Path:
    """root/{train,test}/{a,b}/ with `per_class` small PNGs each."""
    from PIL import Image

    for index, name in enumerate("ab"):
        for split in ("train", "test"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", (8, 8), (40 * index, 10 * i, 0)).save(folder / f"{i}.png")
    return root


def test_a_dangling_symlink_among_the_images_is_a_mistake_named_with_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("harness.folders.CACHE_DIR", tmp_path / "cache")
    root = image_folder(tmp_path / "images")
    link = root / "train" / "a" / "gone.png"
    link.symlink_to(tmp_path / "no-such-file.png")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_sentence(capsys, ["run", "pruning", "--set", "model=tiny_cnn", "--set", "dataset=imagefolder",
                          "--set", f"data_dir={root}", "--set", "epochs=1", "--set", "pruning_backend=torch-pruning",
                          "--tracking-uri", uri], 2, str(link), "a link to nothing")


def test_a_grid_past_max_cells_is_refused_on_its_count_without_building_a_cell(tmp_path, monkeypatch, capsys):
    from harness.cells import Cell

    sweep = tmp_path / "vast.toml"
    sweep.write_text('name = "vast"\nexperiment = "pruning"\n[base]\nmodel = "tiny_cnn"\ndataset = "synthetic"\n'
                     f"[grid]\nsparsity = {[round(i / 1000, 3) for i in range(1000)]}\n"
                     f"lr = {[round(0.001 * (i + 1), 3) for i in range(100)]}\n")
    built = []
    monkeypatch.setattr(Cell, "build", classmethod(lambda cls, *a, **k: built.append(1)))
    one_sentence(capsys, ["sweep", str(sweep), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}",
                          "--max-cells", "1000"], 2, "100000 cells", "more than --max-cells 1000")
    assert built == []   # 100,000 configs were built and validated first
    assert not (tmp_path / "m.db").exists()


# Stands in for the heavy imports' slow teardown on a busy machine: work the interpreter does at its
# end, after the atexit handlers (threading's own shutdown hooks, as concurrent.futures uses them).
SLOW_TEARDOWN = '''
import threading, time

threading._register_atexit(lambda: time.sleep(60))
'''


def test_a_mistake_exits_once_its_sentence_is_out_not_after_the_interpreters_teardown(tmp_path):
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_TEARDOWN)
    sweep = tmp_path / "zero.toml"
    sweep.write_text('name = "zero"\nexperiment = "pruning"\nrepeats = 0\n[base]\nmodel = "tiny_cnn"\n'
                     'dataset = "synthetic"\n[grid]\nsparsity = [0.0]\n')
    import harness

    project = str(Path(harness.__file__).resolve().parents[1])   # the code under test, wherever it is
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), project])}
    process = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(sweep), "--tracking-uri",
                                f"sqlite:///{tmp_path / 'm.db'}"], stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path)
    try:
        line = process.stderr.readline()
        said = time.monotonic()
        assert process.wait(timeout=45) == 2, "the process lived on after its sentence"
        assert time.monotonic() - said < 30, "the process lived on after its sentence"
    finally:
        process.kill()
    assert "key 'repeats'" in line and "greater than or equal to 1" in line


# --- the store probe: a starved process is not a silent server ------------------------------------------
class _AnsweringEngine:
    """What check_server needs of an engine on a server that answers."""

    def connect(self):
        import contextlib

        return contextlib.nullcontext()

    def dispose(self):
        pass


def _burn_cpu(seconds: float) -> None:
    import time

    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_probe_busy_importing_and_handshaking_is_not_a_silent_server(monkeypatch):
    from harness.store import probe

    monkeypatch.setattr(probe, "PROBE_TIMEOUT_S", 1.0)

    def slow_to_build(url):   # the driver's imports and handshake: CPU work, here twice the budget
        _burn_cpu(2.0)
        return _AnsweringEngine()

    probe.check_server("postgresql://u@127.0.0.1/x", "the shared database", slow_to_build)


STARVED_PROBE = '''
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
from harness.store import probe
probe.PROBE_TIMEOUT_S = 1.0
sys.path.insert(0, sys.argv[2])
from test_probed_faults import _AnsweringEngine, _burn_cpu

def starved_build(url):   # 0.8 s of CPU, inside the budget, but a third of one core takes ~2.4 s of wall
    _burn_cpu(0.8)
    return _AnsweringEngine()

started = time.monotonic()
probe.check_server("postgresql://u@127.0.0.1/x", "the shared database", starved_build)
print(f"answered after {time.monotonic() - started:.1f} s")
'''


def test_a_probe_starved_of_cpu_by_other_work_waits_for_the_server_to_answer(tmp_path):
    import os
    import subprocess
    import sys

    cpu = sorted(os.sched_getaffinity(0))[0]
    pin = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731 (run in each busy loop before it starts)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin) for _ in range(2)]
    try:
        done = subprocess.run([sys.executable, "-c", STARVED_PROBE, str(cpu), str(Path(__file__).parent)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert done.returncode == 0 and "answered after" in done.stdout, done.stderr[-2000:]


def test_a_silent_server_is_still_refused_at_the_probes_budget(monkeypatch):
    import socket
    import time

    import pytest

    from harness.errors import UserError
    from harness.store import probe, shared_db

    monkeypatch.setattr(probe, "PROBE_TIMEOUT_S", 1.0)
    with socket.socket() as silent:   # takes connections and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/x"
        started = time.monotonic()
        with pytest.raises(UserError, match="did not answer within 1 s"):
            probe.check_server(url, "the shared database", shared_db.create_engine)
        assert time.monotonic() - started < 5
