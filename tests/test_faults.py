"""Every fault a user meets, reproduced for real: each gives one sentence on stderr, the
right exit status, no traceback, and the store holds afterwards what it should (nothing lost,
nothing left RUNNING, no cell twice). The numbers are the issue's items.

Real faults, no mocks: a read-only file or folder is made with `chattr +i` (the tests run as root,
whom permission bits do not stop; an immutable file stops root too), a full disk is a file-size
limit (`RLIMIT_FSIZE`) set in the child process, a corrupt store is a file of random bytes or a
truncated database, an unreachable server is a closed port.
"""

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
from conftest import TINY_BASE, free_port, mlflow_client, skip_unless_ci

from harness.cli import main
from harness.store.tracking import CELL_ID, OUTCOME, REASON, Store
from harness.store.uris import DEFAULT_TRACKING_URI

# --- helpers ------------------------------------------------------------------------------------


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


# --- 1. two ordinary sweeps at once on one store --------------------------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_01_two_sweeps_started_together_run_each_cell_once(tmp_path, uri):
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


# --- 2-4. spec files: wrong types, not UTF-8, a malformed study space ---------------------------------
@pytest.mark.parametrize("text, words", [
    (SWEEP.replace('experiment = "pruning"', 'experiment = "pruning"\nrepeats = "abc"'), ["key 'repeats'", "integer", "'abc'"]),
    (SWEEP.replace("[base]\nmodel", "base = 5\n[other]\nmodel"), ["key 'base'", "dictionary", "5"]),
    (SWEEP + "[scales]\nsmoke = 3\n", ["key 'scales.smoke'", "dictionary", "3"]),
    (SWEEP.replace('name = "typed"', "name = 5"), ["key 'name'", "string", "5"]),
    (SWEEP.replace("[grid]", "colour = 3\n[grid]"), ["unknown config key 'colour'"]),
    ("surprise = 1\n" + SWEEP, ["unknown key", "surprise"]),
    (SWEEP.replace("sparsity = [", "sparsity = [[["), ["not valid TOML"]),
])
def test_02_a_sweep_file_with_a_wrong_type_or_key_is_one_sentence_naming_file_and_key(text, words, tmp_path, uri, capsys):
    path = tmp_path / "typed.toml"
    path.write_text(text)
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, str(path), *words)
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store was opened


def test_03_a_sweep_file_that_is_not_utf8_is_one_sentence(tmp_path, uri, capsys):
    path = tmp_path / "b.toml"
    path.write_bytes(b'name="b"\n#\xff\n')
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, str(path), "not UTF-8")
    unreadable = tmp_path / "gone.toml"
    in_process(["sweep", str(unreadable), "--tracking-uri", uri], 2, capsys, "gone")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("space, words", [
    (None, ["key 'space'", "dictionary", "3"]),
    ('lr = { type = "float", low = "a", high = 1.0 }\n', ["key 'space.lr.low'", "number", "'a'"]),
    ('lr = { type = "float", high = 1.0 }\n', ["key 'space.lr'", "low and high"]),
    ('lr = { type = "float", low = 0.1, high = 0.01 }\n', ["key 'space.lr'", "inverted"]),
    ('lr = { type = "float", low = 0.001, high = 1.0, colour = 1 }\n', ["unknown key", "colour"]),
    ('lr = { typ = "float" }\n', ["unknown key", "typ"]),
])
def test_04_a_malformed_study_space_is_one_sentence(space, words, study_file, tmp_path, uri, capsys):
    path = study_file("space", space=space or "")
    if space is None:  # `space = 3`, not a table
        path.write_text(path.read_text().replace("[space]\n", "").replace("n_trials = 4\n", "n_trials = 4\nspace = 3\n"))
    in_process(["study", str(path), "--tracking-uri", uri], 2, capsys, str(path), *words)
    assert not (tmp_path / "mlflow.db").exists()


# --- 5. a sweep of zero cells ---------------------------------------------------------------------
@pytest.mark.parametrize("how, words", [
    ("set", ["sparsity=[]", "no cell"]),
    ("repeats", ["key 'repeats'", "greater than or equal to 1"]),
    ("scale", ["no cell to run"]),
])
def test_05_a_sweep_of_zero_cells_is_refused_and_creates_no_run(how, words, tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "empty", [0.0, 0.5])
    args = ["sweep", str(path), "--tracking-uri", uri]
    if how == "set":
        args += ["--set", "sparsity=[]"]
    elif how == "repeats":
        path.write_text("repeats = 0\n" + path.read_text())
    else:  # a scale that empties an axis
        path.write_text(path.read_text() + "[scales.smoke]\nsparsity = []\n")
        args += ["--scale", "smoke"]
    in_process(args, 2, capsys, *words)
    assert all_runs(uri) == []  # no empty parent run


# --- 6 and 12. data: a broken image, one class, a test split missing a class ---------------------------
def _image_folder(root: Path, classes: dict[str, tuple[int, int]]) -> Path:
    """root/train/<class>/ and root/test/<class>/ with (train, test) images of each class."""
    from PIL import Image

    for index, (name, (n_train, n_test)) in enumerate(classes.items()):
        for split, count in (("train", n_train), ("test", n_test)):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                Image.new("RGB", (8, 8), (40 * index, 10 * i, 0)).save(folder / f"{i}.png")
    return root


def _run_on_folder(root: Path, uri: str) -> list[str]:
    return ["run", "pruning", "--set", "model=tiny_cnn", "--set", "dataset=imagefolder", "--set",
            f"data_dir={root}", "--set", "epochs=1", "--set", "pruning_backend=torch-pruning",
            "--tracking-uri", uri]


@pytest.fixture
def image_cache(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.folders.CACHE_DIR", tmp_path / "cache")  # decoded folders are cached there


def test_06_an_image_that_is_not_an_image_is_named(tmp_path, uri, capsys, image_cache):
    root = _image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    bad = root / "train" / "a" / "broken.jpg"
    bad.write_text("not an image")
    in_process(_run_on_folder(root, uri), 2, capsys, str(bad), "not an image")
    assert all_runs(uri) == []


@pytest.mark.parametrize("classes, words", [
    ({"a": (3, 2)}, ["1 class folder", "at least two"]),
    ({"a": (3, 2), "b": (3, 0)}, ["test", "no images of class 'b'"]),
    ({"a": (3, 2), "b": (0, 2)}, ["train", "no images of class 'b'"]),
])
def test_12_a_dataset_of_one_class_or_a_split_missing_a_class_is_refused(classes, words, tmp_path, uri, capsys,
                                                                         image_cache):
    root = _image_folder(tmp_path / "images", classes)
    in_process(_run_on_folder(root, uri), 2, capsys, *words)
    assert all_runs(uri) == []


def test_12_a_test_class_the_training_split_lacks_is_refused(tmp_path, uri, capsys, image_cache):
    root = _image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    _image_folder(tmp_path / "extra", {"c": (0, 2)})
    (tmp_path / "extra" / "test" / "c").rename(root / "test" / "c")
    in_process(_run_on_folder(root, uri), 2, capsys, "class folder 'c'")


# --- 7. an unreachable or corrupt store: one sentence within 10 s, no retry spam ------------------
def _corrupt_stores(tmp_path) -> dict[str, str]:
    noise = tmp_path / "noise.db"
    noise.write_bytes(os.urandom(64 * 1024))
    real = tmp_path / "real" / "mlflow.db"
    Store(f"sqlite:///{real}").experiment_id("filler")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(real.read_bytes()[: real.stat().st_size // 3])
    return {"postgresql": f"postgresql://nobody@127.0.0.1:{closed_port()}/x",
            "random bytes": f"sqlite:///{noise}", "truncated": f"sqlite:///{truncated}"}


def test_07_an_unreachable_or_corrupt_store_is_refused_within_10_s(tmp_path):
    from harness.errors import UserError

    for kind, bad in _corrupt_stores(tmp_path).items():
        started = time.monotonic()
        with pytest.raises(UserError) as refused:
            Store(bad)
        assert time.monotonic() - started < 10, kind
        assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_07_an_unreachable_or_corrupt_store_is_one_line_from_a_real_process(tmp_path):
    for kind, bad in _corrupt_stores(tmp_path).items():
        before = digest(Path(bad.removeprefix("sqlite:///"))) if bad.startswith("sqlite") else None
        done = harness("run", "pruning", "--set", "dataset=synthetic", "--tracking-uri", bad, timeout=120)
        assert done.returncode == 2, (kind, done.stderr[-2000:])
        line = assert_one_sentence(done.stderr)
        assert ("cannot reach" in line) if kind == "postgresql" else ("not a usable SQLite database" in line), line
        if before:
            assert digest(Path(bad.removeprefix("sqlite:///"))) == before  # the damaged file is left as it was


# --- 8. a read-only store ---------------------------------------------------------------------------
@pytest.mark.slow
def test_08_a_read_only_store_is_one_sentence_before_anything_runs(tmp_path, uri):
    path = tiny_sweep(tmp_path, "readonly", [0.0, 0.5])
    db = tmp_path / "mlflow.db"
    Store(uri).experiment_id("readonly")
    before = digest(db)
    with immutable(db):
        done = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert done.returncode == 2, done.stderr[-2000:]
    assert_one_sentence(done.stderr, str(db), "cannot be written")
    assert digest(db) == before and all_runs(uri) == []


# --- 9. an unwritable artifacts folder: before the sweep, and in the middle of it ---------------------
@pytest.mark.slow
def test_09_an_unwritable_artifacts_folder_is_one_sentence_before_any_cell(tmp_path, uri):
    path = tiny_sweep(tmp_path, "noartifacts", [0.0, 0.5])
    Store(uri).experiment_id("noartifacts")
    with immutable(tmp_path / "artifacts" / "noartifacts"):
        done = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert done.returncode == 2, done.stderr[-2000:]
    assert_one_sentence(done.stderr, "artifacts folder", "does not take new files")
    assert all_runs(uri) == []  # no parent run, no cell


@pytest.mark.slow
def test_09_artifacts_refused_mid_sweep_record_the_cell_failed_and_close_the_parent(tmp_path, uri):
    sparsities = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    path = tiny_sweep(tmp_path, "midway", sparsities, epochs=3)
    Store(uri).experiment_id("midway")
    folder = tmp_path / "artifacts" / "midway"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri,
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not any(r.info.status == "FINISHED" for r in cells_and_parents(uri)[0]):
            assert proc.poll() is None and time.time() < deadline, "no cell finished"
            time.sleep(0.1)
        with immutable(folder):  # from now on no new run can store its config.json
            out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, "refused to store an artifact", "finished cells are kept")
    cells, parents = cells_and_parents(uri)
    assert all(r.info.status != "RUNNING" for r in cells + parents)
    failed = [r for r in cells if r.info.status == "FAILED"]
    assert len(failed) == 1 and "refused to store an artifact" in failed[0].data.tags[REASON]
    assert all(r.data.tags[OUTCOME] == "ok" for r in cells if r not in failed)
    assert 1 <= len(cells) - 1 < len(sparsities)
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert parents[0].data.tags[REASON].startswith(f"stopped after {len(cells) - 1} of {len(sparsities)} cells")


# --- 10. a full disk: in the middle of a sweep, and while a new store is created ------------------------
@pytest.mark.slow
def test_10_disk_full_mid_sweep_then_space_freed_loses_nothing(tmp_path, uri):
    sparsities = [round(0.05 * i, 2) for i in range(12)]
    path = tiny_sweep(tmp_path, "fulldisk", sparsities)
    Store(uri)
    # The store may grow by 64 KiB and its write-ahead log to the store's size: a few cells' worth.
    limit = (tmp_path / "mlflow.db").stat().st_size + 64 * 1024
    args = ["sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    full = harness(*args, file_size_limit=limit)
    assert full.returncode == 1, full.stderr[-2000:]
    line = assert_one_sentence(full.stderr, "refused", "finished cells are kept")
    cells, parents = cells_and_parents(uri)
    finished = {r.data.tags[CELL_ID]: r.info.run_id for r in cells if r.info.status == "FINISHED"}
    assert 1 <= len(finished) < len(sparsities), "the fault should come after some cells and before the end"
    assert len(finished) == len([r for r in cells if r.info.status == "FINISHED"])  # no cell twice
    left_open = [r for r in cells + parents if r.info.status == "RUNNING"]
    # What the store still took is closed; what it refused, the sentence says will be closed next time.
    assert not left_open or "could not close" in line, line

    assert main(args) == 0  # space freed: the same command (here: no second start-up of torch and MLflow)
    cells, parents = cells_and_parents(uri)
    assert sorted(r.data.tags[CELL_ID] for r in cells) == sorted({r.data.tags[CELL_ID] for r in cells})
    assert len(cells) == len(sparsities) and all(r.data.tags[OUTCOME] == "ok" for r in cells)
    assert all(r.info.status != "RUNNING" for r in cells + parents)
    kept = {r.data.tags[CELL_ID]: r.info.run_id for r in cells}
    assert all(kept[cell] == run for cell, run in finished.items())  # measured before the fault: kept


@pytest.mark.slow
def test_10_a_store_created_on_a_full_disk_leaves_nothing_and_works_once_space_is_freed(tmp_path, uri, monkeypatch):
    from harness.store.tracking import EMPTY_STORE_ENV

    monkeypatch.delenv(EMPTY_STORE_ENV, raising=False)  # MLflow's own migrations cut short, not a copy
    path = tiny_sweep(tmp_path, "newstore", [0.0])
    args = ["sweep", str(path), "--tracking-uri", uri, "--no-progress"]
    full = harness(*args, file_size_limit=200_000)  # far less than MLflow's migrated schema
    assert full.returncode == 2, full.stderr[-2000:]
    assert_one_sentence(full.stderr, "cannot create the tracking store", "nothing was left behind")
    assert sorted(p.name for p in tmp_path.iterdir() if "mlflow.db" in p.name) == []
    assert main(args) == 0  # the same command, here
    cells, _ = cells_and_parents(uri)
    assert [r.data.tags[OUTCOME] for r in cells] == ["ok"]


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


# --- 11. report --out: a file, an impossible path ---------------------------------------------------
def test_11_report_out_that_is_a_file_or_cannot_be_made_is_one_sentence(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "reported", [0.0])
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    in_process(["report", str(path), "--out", str(a_file), "--tracking-uri", uri], 2, capsys,
               str(a_file), "is a file")
    assert a_file.read_text() == "mine"
    in_process(["report", str(path), "--out", str(a_file / "sub"), "--tracking-uri", uri], 2, capsys,
               "report folder", "does not take new files")
    in_process(["report", "--out", "/proc/no/such/place", "--tracking-uri", uri], 2, capsys,
               "/proc/no/such/place")
    in_process(["study", "lr_batch", "--out", str(a_file), "--tracking-uri", uri], 2, capsys, "is a file")
    assert not (tmp_path / "mlflow.db").exists()


# --- 13. non-finite numbers -------------------------------------------------------------------------
@pytest.mark.parametrize("sets, words", [
    (["lr=inf"], ["lr", "'inf'", "finite"]),
    (["lr=nan"], ["lr", "'nan'", "finite"]),
    (["lr=-Infinity"], ["lr", "finite"]),
    (["sparsity=[0.1,NaN]"], ["sparsity", "nan", "finite"]),
    (["weight_decay=1e999"], ["weight_decay", "finite"]),
])
def test_13_non_finite_numbers_from_set_are_refused(sets, words, tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "finite", [0.0])
    args = [a for s in sets for a in ("--set", s)]
    in_process(["sweep", str(path), *args, "--tracking-uri", uri], 2, capsys, *words)
    if not any(s.startswith("sparsity") for s in sets):
        in_process(["run", "pruning", *args, "--tracking-uri", uri], 2, capsys, *words)
    assert all_runs(uri) == []


def test_13_non_finite_numbers_in_spec_files_and_options_are_refused(tmp_path, study_file, uri, capsys):
    path = tiny_sweep(tmp_path, "finite", [0.0])
    path.write_text(path.read_text().replace("lr = 0.01", "lr = inf"))
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "key 'base.lr'", "finite")
    path.write_text(path.read_text().replace("lr = inf", "lr = 0.01").replace("[0.0]", "[0.0, nan]"))
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "key 'grid.sparsity[1]'", "finite")
    study = study_file("finite", space='lr = { type = "float", low = 1e-3, high = inf }\n')
    in_process(["study", str(study), "--tracking-uri", uri], 2, capsys, "key 'space.lr.high'", "finite")
    study = study_file("finite", space='lr = { type = "float", low = 1e-3, high = 0.1 }\n')
    in_process(["study", str(study), "--timeout", "nan", "--tracking-uri", uri], 2, capsys, "--timeout", "finite")
    from experiments import make_config
    from harness.errors import UserError

    with pytest.raises(UserError, match="finite"):  # whatever reads a config: a sweep cell, a trial
        make_config({"lr": float("inf")})


# --- 14. an empty tracking URI ------------------------------------------------------------------------
def test_14_an_empty_tracking_uri_is_refused_and_the_projects_store_is_untouched(tmp_path, capsys, monkeypatch):
    default = Path(DEFAULT_TRACKING_URI.removeprefix("sqlite:///"))
    before = default.stat().st_mtime_ns if default.exists() else None
    path = tiny_sweep(tmp_path, "nowhere", [0.0])
    in_process(["sweep", str(path), "--tracking-uri", ""], 2, capsys, "--tracking-uri is empty")
    in_process(["sweep", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage", " "], 2,
               capsys, "--storage is empty")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    in_process(["sweep", str(path)], 2, capsys, "MLFLOW_TRACKING_URI is empty")
    assert (default.stat().st_mtime_ns if default.exists() else None) == before


# --- 15. a model the experiment cannot train ------------------------------------------------------------
def test_15_a_model_the_experiment_cannot_train_is_refused_up_front(tmp_path, uri, study_file, capsys):
    words = ["experiment 'pruning' cannot train model 'lenet_d2l'", "tiny_cnn"]
    in_process(["run", "pruning", "--set", "model=lenet_d2l", "--set", "sparsity=0.5", "--tracking-uri", uri],
               2, capsys, *words)
    path = tiny_sweep(tmp_path, "models", [0.0, 0.5])
    in_process(["sweep", str(path), "--set", "model=lenet_d2l", "--tracking-uri", uri], 2, capsys, *words)
    in_process(["sweep", str(path), "--set", 'model=["tiny_cnn","lenet_d2l"]', "--tracking-uri", uri], 2, capsys,
               *words)
    study = study_file("models", space='model = { choices = ["tiny_cnn", "lenet_d2l"] }\n')
    in_process(["study", str(study), "--tracking-uri", uri], 2, capsys, *words)
    assert all_runs(uri) == []


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


# --- a name that climbs out of its folder --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sweep", "study"])
def test_a_name_that_climbs_out_of_its_folder_is_refused_before_anything_is_written(kind, tmp_path, study_file,
                                                                                    uri, capsys):
    escaped = "../../../ESCAPED"
    if kind == "sweep":
        path = tiny_sweep(tmp_path, "climb", [0.0])
    else:
        path = study_file("climb", space='lr = { type = "float", low = 1e-3, high = 1e-1 }\n')
    path.write_text(path.read_text().replace('name = "climb"', f'name = "{escaped}"'))
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    before = sorted(p.name for p in Path("/").iterdir())
    out = ["--out", str(work)] if kind == "study" else []
    in_process([kind, str(path), "--tracking-uri", uri, *out], 2, capsys, "key 'name'", "plain name", escaped)
    if kind == "sweep":
        in_process(["report", str(path), "--tracking-uri", uri, "--out", str(work)], 2, capsys, "plain name")
    assert sorted(p.name for p in Path("/").iterdir()) == before and not Path("/ESCAPED.md").exists()
    assert list(work.iterdir()) == [] and not list(tmp_path.glob("**/ESCAPED*"))
    assert all_runs(uri) == []


def test_a_scale_that_climbs_out_is_refused(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "scaled", [0.0])
    path.write_text(path.read_text() + '[scales."../../up"]\nepochs = 1\n')
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, "plain name", "../../up")
    assert all_runs(uri) == []


def test_every_path_built_from_a_name_stays_inside_its_folder(tmp_path):
    from harness.errors import UserError
    from harness.store.paths import inside

    assert inside(tmp_path, "sweep-a") == tmp_path / "sweep-a"
    (tmp_path / "link").symlink_to("/")
    for climbing in ("../x", "/etc/passwd", "link/tmp"):
        with pytest.raises(UserError, match="outside"):
            inside(tmp_path, climbing)
    store = Store(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    with pytest.raises(UserError, match="outside"):  # an experiment named by code, not by a file
        store.experiment_id("../../ESCAPED")
    assert store.find_experiment("../../ESCAPED") is None and not (tmp_path / "ESCAPED").exists()


# --- passwords: never on a command line the harness starts, never in a file it writes ---------------------
PASSWORD = "Pw-s3cret-4f9a"


class _RecordingLauncher:
    """Records the command lines and environments an engine hands its workers; runs none."""
    detach = False

    def __init__(self):
        self.commands, self.envs = [], []

    def cores_per_worker(self, workers):
        return 1

    def run(self, commands, envs, progress=None):
        self.commands, self.envs = commands, envs
        return [0] * len(commands)


def test_workers_get_the_store_locations_through_the_environment_not_argv(sweep_file, study_file, tmp_path):
    from harness.studies import study_engine
    from harness.specs import study_spec
    from harness.specs import sweep_spec
    from harness.sweeps.sweep_engine import run_sweep

    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    db_url = f"sqlite:///{tmp_path / 'claims.db'}"
    sweep, study = _RecordingLauncher(), _RecordingLauncher()
    run_sweep(sweep_spec.load(str(sweep_file("envs", {"sparsity": [0.0, 0.5]}))), store, scale="smoke",
              db_url=db_url, workers=2, launcher=sweep, show_progress=False)
    spec = study_spec.load(str(study_file("envstudy", space='lr = { type = "float", low = 1e-3, high = 1e-1 }\n')))
    study_engine.run_study(spec, store, db_url, scale="smoke", overrides={}, workers=2, launcher=study,
                           show_progress=False,
                           out_dir=tmp_path, log=lambda line: None)
    for launcher in (sweep, study):
        assert len(launcher.commands) == 2
        for command, env in zip(launcher.commands, launcher.envs):
            assert "--tracking-uri" not in command and "--storage" not in command, command
            assert not any(store.uri in a or db_url in a for a in command), command
            assert env["MLFLOW_TRACKING_URI"] == store.uri and env["HARNESS_STORAGE"] == db_url


def test_a_slurm_job_array_gets_the_store_locations_from_the_submitting_environment(monkeypatch, tmp_path):
    """What submitit pickles (the worker commands and environments) holds no store location: sbatch
    passes the submitting process's environment on, and that is where they are while it submits."""
    import submitit

    from harness.launchers import slurm

    seen = {}

    class Executor:
        def __init__(self, folder):
            pass

        def update_parameters(self, **kwargs):
            pass

        def map_array(self, fn, commands, envs):
            seen.update(envs=envs, environ=dict(os.environ))
            raise RuntimeError(f"sbatch: error: cannot reach postgresql://u:{PASSWORD}@db/x")

    monkeypatch.setattr(submitit, "SlurmExecutor", Executor)
    launcher = slurm.SlurmLauncher(folder=tmp_path, shape=slurm.NodeShape(2, 0))
    tracking, storage = f"http://u:{PASSWORD}@host:5000", f"postgresql://u:{PASSWORD}@db/x"
    monkeypatch.delenv("HARNESS_STORAGE", raising=False)
    from harness.errors import UserError

    with pytest.raises(UserError) as refused:
        launcher.run([["python", "-m", "harness", "sweep", "s.toml"]],
                     [{"MLFLOW_TRACKING_URI": tracking, "HARNESS_STORAGE": storage, "OMP_NUM_THREADS": "1"}])
    assert PASSWORD not in str(refused.value) and "***" in str(refused.value)
    assert all(PASSWORD not in v for env in seen["envs"] for v in env.values()) and seen["envs"][0]["OMP_NUM_THREADS"]
    assert seen["environ"]["MLFLOW_TRACKING_URI"] == tracking and seen["environ"]["HARNESS_STORAGE"] == storage
    assert "HARNESS_STORAGE" not in os.environ  # put back as it was


def _stub_ui_server(monkeypatch) -> list:
    """harness ui's MLflow server replaced by one that ran and stopped at once; the list collects
    the (argv, env) of every server started."""
    from harness.cli import ui_server

    started = []

    class Server:   # what serve() needs of the MLflow server it starts: it ran and stopped
        def __init__(self, argv, env=None, **_):
            started.append((argv, env))

        def wait(self):
            return 0

    monkeypatch.setattr(ui_server, "subprocess", SimpleNamespace(Popen=Server, PIPE=subprocess.PIPE))
    monkeypatch.setattr(ui_server, "_wait_until_answering", lambda *a: None)
    return started


def test_the_ui_and_dashboard_servers_get_the_store_through_the_environment(tmp_path, monkeypatch, capsys):
    from harness.cli import ui_server
    from harness.store import Store

    started = _stub_ui_server(monkeypatch)
    monkeypatch.setattr(ui_server, "_banner", lambda store, base: "")
    monkeypatch.setattr(os, "execve", lambda path, argv, env: started.append((argv, env)))
    monkeypatch.setattr("harness.cli.commands._make_study_tables", lambda storage: None)  # no server listens
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert ui_server.serve(Store(uri), free_port()) == 0
    storage = f"postgresql://harness:{PASSWORD}@127.0.0.1:{closed_port()}/studies"
    assert main(["dashboard", "--storage", storage, "--tracking-uri", uri]) == 0
    banners = capsys.readouterr().out
    (ui_argv, ui_env), (board_argv, board_env) = started
    assert uri not in " ".join(ui_argv) and ui_env["MLFLOW_BACKEND_STORE_URI"] == uri
    assert PASSWORD not in " ".join(board_argv) and board_env["HARNESS_STORAGE"] == storage
    assert PASSWORD not in banners and "harness:***@127.0.0.1" in banners


@pytest.mark.parametrize("uri, shown", [
    ("postgresql://bob:s3cret@db:5432/x", "postgresql://bob:***@db:5432/x"),
    ("postgresql+psycopg://bob:p%40ss@db/x", "postgresql+psycopg://bob:***@db/x"),
    ("http://u:pw@host:5000", "http://u:***@host:5000"),
    ("sqlite:////tmp/a/mlflow.db", "sqlite:////tmp/a/mlflow.db"),
])
def test_redact_hides_every_form_of_password(uri, shown):
    from harness.store.uris import hide_passwords, redact

    assert redact(uri) == shown
    assert hide_passwords(f"could not connect to {uri}: refused") == f"could not connect to {shown}: refused"


@pytest.fixture
def password_server(tmp_path):
    """A real `mlflow server` whose URL carries a password (MLflow's own server ignores it), started
    with its backend in the environment, so nothing on a command line holds it. The test's own: for
    a test that kills it."""
    with _serving_with_a_password(tmp_path / "server") as server:
        yield server


@pytest.fixture(scope="module")
def shared_password_server(tmp_path_factory):
    """One such server for the tests that only log to it (each to an experiment of its own name):
    a start-up of MLflow's server and its migrations saved for each. A test that scans every file
    for the password scans the server's folder too (`server.folder`)."""
    with _serving_with_a_password(tmp_path_factory.mktemp("password-server") / "server") as server:
        yield server


@contextlib.contextmanager
def _serving_with_a_password(server_dir: Path):
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


def _command_lines(proc) -> set[str]:
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        return {" ".join(p.cmdline()) for p in [parent, *parent.children(recursive=True)]}
    except psutil.Error:
        return set()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_no_password_in_any_file_written_or_command_line_started(shared_password_server, tmp_path, monkeypatch,
                                                                 capsys):
    password_server = shared_password_server
    path = tiny_sweep(tmp_path, "secret", [0.0, 0.3, 0.6], epochs=2)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": password_server.uri}  # given only through the environment
    command = [sys.executable, "-m", "harness", "sweep", str(path), "--workers", "2", "--no-progress",
               "--storage", f"sqlite:///{work / 'optuna.db'}"]
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while proc.poll() is None:  # every command line of the launcher and its workers, as `ps` shows them
        seen |= _command_lines(proc)
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "View run" not in out and "View experiment" not in out, out  # MLflow's own lines stay off stdout
    assert sum("--worker " in line for line in seen) >= 1, seen
    texts = {"sweep stdout": out, "sweep stderr": err, **{f"argv {i}": line for i, line in enumerate(seen)}}
    reports = tmp_path / "reports"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", password_server.uri)
    for args in (["report", str(path), "--out", str(reports)], ["report", "--out", str(reports)],
                 ["report", str(tiny_sweep(tmp_path, "never", [0.0])), "--out", str(reports)]):
        capsys.readouterr()
        main(args)  # in this process: the reports read the store as a separate process would
        said = capsys.readouterr()
        texts[" ".join(args[:2])] = said.out + said.err
    assert "has not been run in http://harness:***@" in texts[f"report {tmp_path / 'never.toml'}"]
    assert (reports / "REPRODUCTION.md").is_file() and (reports / "secret.md").is_file()
    # Every file: the reports, the claims database, and the server's store (params, tags, descriptions,
    # artifacts), which holds whatever the harness logged.
    for file in [p for folder in (tmp_path, password_server.folder) for p in folder.rglob("*") if p.is_file()]:
        texts[str(file)] = file.read_bytes().decode("latin-1")
    leaks = [where for where, text in texts.items() if PASSWORD in text]
    assert not leaks, leaks
    runs = mlflow_client(SimpleNamespace(uri=password_server.uri)).search_runs(
        [mlflow_client(SimpleNamespace(uri=password_server.uri)).get_experiment_by_name("secret").experiment_id])
    assert sorted(r.data.tags.get(OUTCOME) for r in runs if CELL_ID in r.data.tags) == ["ok"] * 3


@pytest.mark.slow
def test_no_password_in_a_studys_files_output_or_the_ui_banner(shared_password_server, study_file, tmp_path,
                                                                monkeypatch, capsys):
    password_server = shared_password_server
    from harness.cli import ui_server

    path = study_file("secretstudy", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", password_server.uri)  # given only through the environment
    args = ["study", str(path), "--no-progress", "--storage", f"sqlite:///{tmp_path / 'work' / 'optuna.db'}"]
    (tmp_path / "work").mkdir()
    texts = {}
    for extra in (["--out", str(tmp_path / "reports")], ["--status"]):
        capsys.readouterr()
        assert main([*args, *extra]) == 0
        said = capsys.readouterr()
        texts[" ".join(extra)] = said.out + said.err
    texts["ui banner"] = ui_server._banner(Store(password_server.uri), "http://127.0.0.1:5999")
    assert "harness:***@127.0.0.1" in texts["ui banner"]
    # The study's reports, its storage (the study's attributes name the tracking store) and the
    # server's store (the parent run's params and description).
    files = {str(p): p.read_bytes().decode("latin-1")
             for folder in (tmp_path, password_server.folder) for p in folder.rglob("*") if p.is_file()}
    assert any("harness:***@127.0.0.1" in text for text in files.values())  # the store was named, redacted
    assert (tmp_path / "reports" / "secretstudy-full.md").is_file()
    leaks = [where for where, text in {**texts, **files}.items() if PASSWORD in text]
    assert not leaks, leaks


def test_the_ui_server_and_its_banner_hide_a_database_stores_password(monkeypatch, capsys):
    from harness.cli import ui_server

    started = _stub_ui_server(monkeypatch)
    uri = f"postgresql://harness:{PASSWORD}@127.0.0.1:5432/mlflow"
    store = SimpleNamespace(uri=uri, experiments=lambda: [("1", "secret")])   # what the banner reads of a store
    assert ui_server.serve(store, free_port()) == 0
    banner = capsys.readouterr().out
    (argv, env), = started
    assert PASSWORD not in " ".join(argv) and env["MLFLOW_BACKEND_STORE_URI"] == uri
    assert PASSWORD not in banner and "postgresql://harness:***@127.0.0.1:5432/mlflow" in banner


# --- the store deleted mid-sweep ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_store_deleted_mid_sweep_stops_it_with_one_sentence_and_reports_nothing_ok(tmp_path, uri):
    sparsities = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    path = tiny_sweep(tmp_path, "vanish", sparsities, epochs=3)
    db = tmp_path / "mlflow.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri,
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not any(r.info.status == "FINISHED" for r in cells_and_parents(uri)[0]):
            assert proc.poll() is None and time.time() < deadline, "no cell finished"
            time.sleep(0.1)
        for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-shm"):  # what `rm mlflow.db*` does
            (tmp_path / name).unlink(missing_ok=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, str(db), "was deleted", "not kept")
    assert "cells:" not in out, out  # no summary counting cells that went nowhere as ok
    ran = [line for line in out.splitlines() if line.startswith("  sparsity=")]
    assert len(ran) < len(sparsities), out  # it stopped at the next cell
    # Read with a fresh connection (this process's MLflow engine still holds the unlinked file):
    # whatever sits at the path now holds no finished cell, and the same command runs every cell.
    assert _finished_cells(db) == 0
    again = harness("sweep", str(path), "--tracking-uri", uri, "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _finished_cells(db) == len(sparsities), again.stdout


def _finished_cells(db: Path) -> int:
    """FINISHED runs with a cell id in the SQLite store at `db`, read through a new connection."""
    import sqlite3

    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                                "WHERE runs.status = 'FINISHED' AND tags.key = ?", (CELL_ID,)).fetchone()[0]
        except sqlite3.OperationalError:  # no tables: a file no store was built in
            return 0


def test_a_store_deleted_during_a_studys_last_trial_is_named_and_nothing_is_reported(study_file, tmp_path, uri,
                                                                                     capsys, monkeypatch):
    """The real file deleted (as `rm mlflow.db*` does) just as the last trial ends: there is no
    next trial to notice it before, so the study itself checks before its report and summary."""
    from harness.studies import trial_loop

    path = study_file("vanishing", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    real, finished = trial_loop.run_cell, []

    def run_then_delete(*args, **kwargs):
        result = real(*args, **kwargs)
        finished.append(result)
        if len(finished) == 2:
            for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-shm"):
                (tmp_path / name).unlink(missing_ok=True)
        return result

    monkeypatch.setattr(trial_loop, "run_cell", run_then_delete)
    reports = tmp_path / "reports"
    capsys.readouterr()
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(reports)]) == 1
    said = capsys.readouterr()
    assert_one_sentence(said.err, str(tmp_path / "mlflow.db"), "was deleted", "not kept")
    assert len(finished) == 2 and "ran 2 trial(s)" not in said.out, said.out  # no summary of trials gone
    assert not list(reports.glob("*.md")) and _finished_cells(tmp_path / "mlflow.db") == 0


def test_a_store_replaced_by_another_file_is_named(tmp_path):
    from harness.errors import StoreGone

    db = tmp_path / "mlflow.db"
    store = Store(f"sqlite:///{db}")
    store.check_still_there()
    db.rename(tmp_path / "moved.db")
    with pytest.raises(StoreGone, match="was deleted"):
        store.check_still_there()
    Store(f"sqlite:///{db}")  # a new store at the same path: another file
    with pytest.raises(StoreGone, match="replaced"):
        store.check_still_there()


# --- the decoded-folder cache: cut short, stale, and an image too large to decode ------------------------
def _cache_files(tmp_path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*imagefolder*"))  # a temporary file too


def test_a_truncated_cache_is_treated_as_absent_and_rebuilt(tmp_path, uri, image_cache):
    root = _image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    assert main(_run_on_folder(root, uri)) == 0
    caches = _cache_files(tmp_path)
    assert len(caches) == 2  # train and test
    import torch

    whole = {p: torch.load(p) for p in caches}
    for path in caches:  # what a full disk or a kill left under a non-atomic write
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    later = subprocess.run([sys.executable, "-m", "harness", *_run_on_folder(root, uri)], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")})
    assert later.returncode == 0 and "Traceback" not in later.stderr, later.stderr[-2000:]
    assert _cache_files(tmp_path) == caches  # rebuilt whole, in place
    for path, saved in whole.items():
        again = torch.load(path)
        assert torch.equal(again["x"], saved["x"]) and torch.equal(again["y"], saved["y"])
    cells = [r for r in all_runs(uri) if r.info.status == "FINISHED"]
    assert len(cells) == 2 and all(r.data.tags[OUTCOME] == "ok" for r in cells)


def test_a_cache_write_cut_short_by_a_full_disk_leaves_no_cache_and_the_run_goes_on(tmp_path):
    """A real file-size limit (as on a full disk) in a child process that decodes the folder: the
    cache write fails, the decoded data is still returned, and no partial file is left to read."""
    root = _image_folder(tmp_path / "images", {"a": (30, 2), "b": (30, 2)})
    child = textwrap.dedent(f"""\
        import resource, pathlib
        from harness.training import data
        from harness import folders
        folders.CACHE_DIR = pathlib.Path({str(tmp_path / 'cache')!r})
        folders.CACHE_DIR.mkdir()
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # far less than the cache needs
        dataset = data.DATASETS["imagefolder"]({str(root)!r}, 0)
        print(len(dataset.train), len(dataset.test))
        """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["60", "4"]
    assert _cache_files(tmp_path) == []  # neither a truncated cache nor a temporary file


def test_a_file_moved_between_class_folders_changes_the_cache_key(tmp_path, image_cache):
    from harness.training import data

    root = _image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    before = data.DATASETS["imagefolder"](str(root), 0)
    moved = root / "train" / "a" / "0.png"
    stat = moved.stat()
    target = root / "train" / "b" / "9.png"
    moved.rename(target)
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same count, same newest mtime as before
    after = data.DATASETS["imagefolder"](str(root), 0)
    assert len(_cache_files(tmp_path)) == 3  # a new cache for the changed train folder
    assert before.train.y.tolist() == [0, 0, 0, 1, 1, 1]
    assert after.train.y.tolist() == [0, 0, 1, 1, 1, 1]  # the moved image carries its new class


def test_an_image_too_large_to_decode_is_named_like_any_broken_image(tmp_path, uri, capsys, image_cache,
                                                                     monkeypatch):
    from PIL import Image

    root = _image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    huge = root / "train" / "b" / "huge.png"
    Image.new("RGB", (64, 64)).save(huge)
    # PIL's own guard, with its limit lowered so that a 64x64 image trips it as a 20000x20000 one does.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    in_process(_run_on_folder(root, uri), 2, capsys, str(huge), "not an image that can be read")
    assert all_runs(uri) == []


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
    assert skipped.data.tags[OUTCOME] == "skipped" and set(skipped.data.metrics) <= {"speed_index"}   # the calibration only
    assert f"threads={cores + 1} is more than the {cores} core(s)" in skipped.data.tags[REASON]


# --- two stores in one folder, two files with one study name --------------------------------------------
LR_SPACE = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


def test_two_stores_in_one_folder_keep_their_own_claims_and_studies(study_file, tmp_path):
    import optuna

    from harness.store import resolve_db_url

    first, second = (f"sqlite:///{tmp_path / name}" for name in ("mlflow.db", "other.db"))
    assert resolve_db_url(None, first) == f"sqlite:///{tmp_path / 'optuna.db'}"  # the default, as before
    assert resolve_db_url(None, second) == f"sqlite:///{tmp_path / 'other-optuna.db'}"
    path = study_file("twostores", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    out = ["--no-progress", "--out", str(tmp_path / "reports")]
    assert main(["study", str(path), "--tracking-uri", first, *out]) == 0
    assert main(["study", str(path), "--tracking-uri", second, *out]) == 0
    for uri, db in ((first, "optuna.db"), (second, "other-optuna.db")):
        trials = optuna.load_study(study_name="twostores-full", storage=f"sqlite:///{tmp_path / db}").get_trials()
        assert [t.state.name for t in trials] == ["COMPLETE"]  # the second ran its own, resumed none
        cells, _ = cells_and_parents(uri)
        assert [r.data.tags[OUTCOME] for r in cells] == ["ok"]  # each store holds the trial it ran


def test_one_study_database_given_to_two_stores_is_refused_by_the_second(study_file, tmp_path, capsys):
    """The same defect with the database named by hand (or two tracking servers over the project's
    default mlruns/optuna.db): the second store would resume trials whose runs the first holds."""
    path = study_file("onedb", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    first, second = (f"sqlite:///{tmp_path / name / 'mlflow.db'}" for name in ("a", "b"))
    args = ["study", str(path), "--storage", f"sqlite:///{tmp_path / 'studies.db'}", "--no-progress",
            "--out", str(tmp_path / "reports")]
    assert main([*args, "--tracking-uri", first]) == 0
    in_process([*args, "--tracking-uri", second], 2, capsys, "'onedb-full'", "another tracking store", second,
               "--storage")
    assert all_runs(second) == []  # no parent run, no trial in the second store
    assert main([*args, "--tracking-uri", first, "--n-trials", "2"]) == 0  # its own store resumes it
    assert [r.data.tags[OUTCOME] for r in cells_and_parents(first)[0]] == ["ok", "ok"]


def test_a_study_name_claimed_by_a_file_with_another_space_is_refused(study_file, tmp_path, uri, capsys):
    import optuna

    path = study_file("samename", space=LR_SPACE, n_trials=1, base={"epochs": 1})
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)]) == 0
    path.write_text(path.read_text().replace("high = 1e-1", "high = 0.5"))
    in_process(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path)], 2, capsys,
               "'samename-full'", "another [space]", str(path))
    trials = optuna.load_study(study_name="samename-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert len(trials) == 1  # nothing was added to the other file's study
    assert len(cells_and_parents(uri)[0]) == 1


# --- `harness report` on a store that is not there; paths SQLite cannot carry ------------------------------
def test_report_on_a_missing_sqlite_store_creates_nothing_and_keeps_the_old_report(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "REPRODUCTION.md").write_text("kept")
    typo = tmp_path / "mlfow.db"
    in_process(["report", "--tracking-uri", f"sqlite:///{typo}", "--out", str(reports)], 2, capsys,
               str(typo), "creates none")
    path = tiny_sweep(tmp_path, "absent", [0.0])
    in_process(["report", str(path), "--tracking-uri", f"sqlite:///{typo}", "--out", str(reports)], 2, capsys,
               "'absent' has not been run", str(typo))
    assert not typo.exists() and not (tmp_path / "artifacts").exists()
    assert (reports / "REPRODUCTION.md").read_text() == "kept" and sorted(os.listdir(reports)) == ["REPRODUCTION.md"]
    empty = f"sqlite:///{tmp_path / 'empty' / 'mlflow.db'}"
    Store(empty)  # a store that exists, with no sweep in it
    in_process(["report", "--tracking-uri", empty, "--out", str(reports)], 2, capsys, "no sweep has a finished cell",
               "left as it was")
    assert (reports / "REPRODUCTION.md").read_text() == "kept"


@pytest.mark.parametrize("folder", ["a?mode=ro", "a%3Fb", "100%"])
def test_a_sqlite_path_sqlite_cannot_carry_is_refused_and_leaves_nothing(folder, tmp_path, capsys):
    path = tiny_sweep(tmp_path, "marks", [0.0])
    before = sorted(p.name for p in tmp_path.iterdir())
    uri = f"sqlite:///{tmp_path / folder / 'mlflow.db'}"
    char = "?" if "?" in folder else "%"
    in_process(["sweep", str(path), "--tracking-uri", uri], 2, capsys, f"holds '{char}'")
    good = f"sqlite:///{tmp_path / 'fine' / 'mlflow.db'}"
    in_process(["sweep", str(path), "--tracking-uri", good, "--storage", f"sqlite:///{tmp_path / folder / 'x.db'}"], 2,
               capsys, "the shared database", f"holds '{char}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder, no lock, no store


# --- large jobs ---------------------------------------------------------------------------------------
def test_a_sweep_past_max_cells_is_refused_and_a_large_one_says_how_large_first(tmp_path, uri, capsys):
    path = tiny_sweep(tmp_path, "huge", [round(i / 1000, 3) for i in range(600)])
    in_process(["sweep", str(path), "--tracking-uri", uri, "--set", "lr=[0.01,0.02]", "--max-cells", "1000"], 2,
               capsys, "1200 cells", "more than --max-cells 1000")
    in_process(["sweep", str(path), "--tracking-uri", uri, "--max-cells", "0"], 2, capsys, "--max-cells")
    assert all_runs(uri) == []
    # 10^9 epochs in one cell: the estimate comes before the cell starts (stopped here by a cap of 0 cells run).
    small = tiny_sweep(tmp_path, "long", [0.0])
    capsys.readouterr()
    assert main(["sweep", str(small), "--tracking-uri", uri, "--set", "epochs=1000000000", "--set",
                 "sparsity=[0.0,0.1]", "--max-cells", "1"]) == 2
    assert "more than --max-cells 1" in capsys.readouterr().err
    from harness.cli import commands

    args = SimpleNamespace(scale="full", sets=["epochs=1000000000"], max_cells=10)
    from harness.specs import sweep_spec

    commands._size_of_job(sweep_spec.load(str(small)), args)
    said = capsys.readouterr().err
    assert "is a large job: 1 cells, 1000000000 epochs in all" in said and all_runs(uri) == []


def test_a_study_past_max_trials_is_refused_before_anything_is_made(study_file, tmp_path, uri, capsys):
    path = study_file("vast", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    reports = tmp_path / "reports"
    args = ["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(reports)]
    in_process([*args, "--n-trials", "20000"], 2, capsys, "study vast at scale full has 20000 trials",
               "more than --max-trials 10000", "--n-trials")
    in_process([*args, "--max-trials", "0"], 2, capsys, "--max-trials must be at least 1 (got 0)")
    # The cap is the study's, not each worker's: two workers sharing 3 trials are 3 trials.
    in_process([*args, "--n-trials", "3", "--max-trials", "2", "--workers", "2"], 2, capsys,
               "has 3 trials, more than --max-trials 2")
    # Under Slurm it refuses before anything is checked or submitted (here no sbatch is even needed).
    in_process([*args, "--n-trials", "3", "--max-trials", "2", "--launcher", "slurm"], 2, capsys,
               "more than --max-trials 2")
    assert all_runs(uri) == [] and not (tmp_path / "optuna.db").exists() and not reports.exists()
    # --status runs no trial, so no cap stops it from reading the study (not run yet: its own sentence).
    in_process([*args, "--n-trials", "20000", "--status"], 2, capsys, "has not been run")


def test_a_large_study_says_how_large_before_its_first_trial(study_file, tmp_path, uri, capsys):
    path = study_file("long", space=LR_SPACE, n_trials=2, base={"epochs": 1})
    # 10^9 epochs a trial: the estimate comes first; then the study opens and its timeout, already
    # past, lets no trial start.
    capsys.readouterr()
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "reports"),
                 "--set", "epochs=1000000000", "--timeout", "1e-9"]) == 0
    said = capsys.readouterr()
    assert ("harness: study long (full) is a large job: 2 trials, at most 2000000000 epochs in all; Ctrl-C stops "
            "it (finished trials are kept) and --max-trials caps it.") in said.err
    assert "ran 0 trial(s)" in said.out and cells_and_parents(uri)[0] == []
    # A searched epochs counts at the top of its range; a small study of short trials says nothing.
    from harness.cli import commands
    from harness.specs import study_spec

    searched = study_spec.load(str(study_file("searched", space='epochs = { type = "int", low = 1, high = 60000 }\n',
                                             n_trials=2)))
    commands._size_of_study(searched, SimpleNamespace(scale="full", n_trials=None, max_trials=10), {})
    assert "study searched (full) is a large job: 2 trials, at most 120000 epochs in all" in capsys.readouterr().err
    commands._size_of_study(searched, SimpleNamespace(scale="full", n_trials=1, max_trials=10), {})
    assert capsys.readouterr().err == ""


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


# --- a tracking server killed mid-sweep ----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_killed_tracking_server_is_named_within_30_s(password_server, tmp_path):
    import signal

    path = tiny_sweep(tmp_path, "serverdies", [0.0, 0.2, 0.4, 0.6], epochs=400, train_limit=64, test_limit=32)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", password_server.uri,
                             "--storage", f"sqlite:///{tmp_path / 'optuna.db'}", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = mlflow_client(SimpleNamespace(uri=password_server.uri))
    try:
        deadline = time.time() + 180
        while True:  # a cell is inside its epochs
            assert proc.poll() is None and time.time() < deadline, "no cell started"
            found = client.get_experiment_by_name("serverdies")
            if found and [r for r in client.search_runs([found.experiment_id]) if r.data.metrics]:
                break
            time.sleep(0.2)
        os.killpg(password_server.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert_one_sentence(err, "tracking store", "http://harness:***@")
    assert took < 30, f"{took:.0f} s of silence before the sentence"
