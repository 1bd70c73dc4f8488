"""Faults of the data (broken images, missing classes, the decoded-folder cache),
reproduced for real: each gives one sentence on stderr, the right exit status, no traceback,
and the store holds afterwards what it should. How the faults are made: tests/fault_helpers.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.store.tracking import OUTCOME

from fault_helpers import all_runs, image_folder, in_process, run_on_folder
from fault_helpers import image_cache, uri  # noqa: F401 (fixtures)


# --- data: a broken image, one class, a test split missing a class ---------------------------


def test_an_image_that_is_not_an_image_is_named(tmp_path, uri, capsys, image_cache):
    root = image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    bad = root / "train" / "a" / "broken.jpg"
    bad.write_text("not an image")
    in_process(run_on_folder(root, uri), 2, capsys, str(bad), "not an image")
    assert all_runs(uri) == []


@pytest.mark.parametrize("classes, words", [
    ({"a": (3, 2)}, ["1 class folder", "at least two"]),
    ({"a": (3, 2), "b": (3, 0)}, ["test", "no images of class 'b'"]),
    ({"a": (3, 2), "b": (0, 2)}, ["train", "no images of class 'b'"]),
])
def test_a_dataset_of_one_class_or_a_split_missing_a_class_is_refused(classes, words, tmp_path, uri, capsys,
                                                                         image_cache):
    root = image_folder(tmp_path / "images", classes)
    in_process(run_on_folder(root, uri), 2, capsys, *words)
    assert all_runs(uri) == []


def test_a_test_class_the_training_split_lacks_is_refused(tmp_path, uri, capsys, image_cache):
    root = image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    image_folder(tmp_path / "extra", {"c": (0, 2)})
    (tmp_path / "extra" / "test" / "c").rename(root / "test" / "c")
    in_process(run_on_folder(root, uri), 2, capsys, "class folder 'c'")


# --- the decoded-folder cache: cut short, stale, and an image too large to decode ------------------------
def _cache_files(tmp_path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*imagefolder*"))  # a temporary file too


def test_a_truncated_cache_is_treated_as_absent_and_rebuilt(tmp_path, uri, image_cache):
    root = image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    assert main(run_on_folder(root, uri)) == 0
    caches = _cache_files(tmp_path)
    assert len(caches) == 2  # train and test
    import torch

    whole = {p: torch.load(p) for p in caches}
    for path in caches:  # what a full disk or a kill left under a non-atomic write
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    later = subprocess.run([sys.executable, "-m", "harness", *run_on_folder(root, uri)], capture_output=True,
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
    root = image_folder(tmp_path / "images", {"a": (30, 2), "b": (30, 2)})
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

    root = image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
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

    root = image_folder(tmp_path / "images", {"a": (3, 2), "b": (3, 2)})
    huge = root / "train" / "b" / "huge.png"
    Image.new("RGB", (64, 64)).save(huge)
    # PIL's own guard, with its limit lowered so that a 64x64 image trips it as a 20000x20000 one does.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    in_process(run_on_folder(root, uri), 2, capsys, str(huge), "not an image that can be read")
    assert all_runs(uri) == []
