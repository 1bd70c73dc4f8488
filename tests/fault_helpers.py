"""What the fault tests share: running the harness in this process or as a real one, reading the
store back, making a file immutable, a closed port, a tiny sweep file, image folders, and a real
MLflow server whose URL carries a password."""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import TINY_BASE, mlflow_client, skip_unless_ci

from harness.cli import main
from harness.store.tracking import CELL_ID


# --- running the harness, reading the store ------------------------------------------------------------------------------------


def visible_lines(stderr: str) -> list[str]:
    """What a terminal shows of stderr: a progress bar redrawn with carriage returns and erased
    (tqdm's leave=False) leaves only what came after its last return."""
    return [shown for line in stderr.split("\n") if (shown := line.split("\r")[-1]).strip()]


def assert_one_sentence(stderr: str, *words: str) -> str:
    lines = visible_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("harness: error: ") and "Traceback" not in stderr, stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def in_process(argv: list[str], code: int, capsys, *words: str) -> str:
    """`harness ARGV` in this process: exit status `code` and one sentence holding every word."""
    capsys.readouterr()
    assert main(argv) == code
    return assert_one_sentence(capsys.readouterr().err, *words)


def harness(*args: str, file_size_limit: int | None = None, memory_limit: int | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """`harness ARGS` as a real process; with `file_size_limit`, no file it writes may grow past
    that many bytes (Python ignores SIGXFSZ, so a write beyond it fails as on a full disk); with
    `memory_limit`, its address space may not grow past that many bytes."""
    def limit() -> None:
        if file_size_limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        if memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit if file_size_limit or memory_limit else None)


def all_runs(uri: str) -> list:
    """Every run of every experiment in the store, read with MLflow's own client (none when the
    store was never created)."""
    if not Path(uri.removeprefix("sqlite:///")).exists():
        return []
    client = mlflow_client(SimpleNamespace(uri=uri))
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def cells_and_parents(uri: str) -> tuple[list, list]:
    runs = all_runs(uri)
    return [r for r in runs if CELL_ID in r.data.tags], [r for r in runs if CELL_ID not in r.data.tags]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def immutable(path: Path):
    """`path` (file or folder) refuses every change, root's included, while inside."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:  # CI runs as root on ext4, where chattr works: there this is a failure
        skip_unless_ci(f"cannot make {path} immutable here (chattr: {done.stderr.strip() or done.returncode}); "
                       "these checks need root on a file system with the immutable attribute")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def tiny_sweep(folder: Path, name: str, sparsities: list[float], **base) -> Path:
    """A sweep file of tiny cells (a second or so each), on the tiny CNN and synthetic data."""
    values = {**TINY_BASE, "pruning_backend": "torch-pruning", "warmup_epochs": 0, **base}
    text = f'name = "{name}"\nexperiment = "pruning"\n[base]\n'
    text += "".join(f"{k} = {_toml(v)}\n" for k, v in values.items())
    text += f"[grid]\nsparsity = {_toml(sparsities)}\n"
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _toml(value) -> str:
    return repr(value).replace("'", '"')


@pytest.fixture
def uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


SWEEP = textwrap.dedent("""\
    name = "typed"
    experiment = "pruning"
    [base]
    model = "tiny_cnn"
    dataset = "synthetic"
    [grid]
    sparsity = [0.0, 0.5]
    """)


def image_folder(root: Path, classes: dict[str, tuple[int, int]]) -> Path:
    """root/train/<class>/ and root/test/<class>/ with (train, test) images of each class."""
    from PIL import Image

    for index, (name, (n_train, n_test)) in enumerate(classes.items()):
        for split, count in (("train", n_train), ("test", n_test)):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                Image.new("RGB", (8, 8), (40 * index, 10 * i, 0)).save(folder / f"{i}.png")
    return root


def run_on_folder(root: Path, uri: str) -> list[str]:
    return ["run", "pruning", "--set", "model=tiny_cnn", "--set", "dataset=imagefolder", "--set",
            f"data_dir={root}", "--set", "epochs=1", "--set", "pruning_backend=torch-pruning",
            "--tracking-uri", uri]


@pytest.fixture
def image_cache(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.folders.CACHE_DIR", tmp_path / "cache")  # decoded folders are cached there


PASSWORD = "Pw-s3cret-4f9a"


@pytest.fixture
def password_server(tmp_path):
    """A real `mlflow server` whose URL carries a password (MLflow's own server ignores it), started
    with its backend in the environment, so nothing on a command line holds it. The test's own: for
    a test that kills it."""
    with serving_with_a_password(tmp_path / "server") as server:
        yield server


@pytest.fixture(scope="module")
def shared_password_server(tmp_path_factory):
    """One such server for the tests that only log to it (each to an experiment of its own name):
    a start-up of MLflow's server and its migrations saved for each. A test that scans every file
    for the password scans the server's folder too (`server.folder`)."""
    with serving_with_a_password(tmp_path_factory.mktemp("password-server") / "server") as server:
        yield server


@contextlib.contextmanager
def serving_with_a_password(server_dir: Path):
    port = closed_port()
    server_dir.mkdir()
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{server_dir / 'server.db'}"}
    # Its log in a file beside the folder the tests scan: a pipe nobody reads would stall a server
    # that serves several tests once the pipe is full.
    log = server_dir.with_name(f"{server_dir.name}-mlflow.log")
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--artifacts-destination",
                                 str(server_dir / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1"], cwd=server_dir, env=env, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)
    import requests

    try:
        deadline = time.time() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"mlflow server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield SimpleNamespace(uri=f"http://harness:{PASSWORD}@127.0.0.1:{port}", folder=server_dir, proc=proc)
    finally:
        import signal

        with contextlib.suppress(ProcessLookupError):  # a test's server: nothing in it is kept
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


LR_SPACE = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'

