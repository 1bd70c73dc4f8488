"""What a new user reads and sees first: the README's first screen names the sources (the book with
its author, publisher and year, d2l's chapter) and, before the first commands are run, the size of
the install and the Chromium step; its glossary explains the words the tables use; and `make
install` prints no setuptools warning that looks like the project's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from harness.folders import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:45])   # what a terminal or a browser shows before scrolling


def test_the_first_screen_names_the_book_and_d2l_with_their_authors_and_publisher():
    for words in ("Accelerate Model Training with PyTorch 2.X", "Maicon Melo Alves", "Packt", "2024",
                  "Dive into Deep Learning", "chapter 12", "Computational"):
        assert words in FIRST_SCREEN, words


def test_the_first_screen_says_the_install_size_and_the_chromium_step_and_keeps_the_first_commands():
    assert re.search(r"\.venv` of about \*\*\d+(\.\d+)? GB\*\*", FIRST_SCREEN)
    assert "make install-system" in FIRST_SCREEN and "Chromium" in FIRST_SCREEN
    for command in ("make install ", "make machine ", "make sweep-sparsity SCALE=smoke", "make test "):
        assert command in FIRST_SCREEN, command


def test_the_glossary_explains_the_words_the_tables_and_reports_use():
    glossary = README.split("## Words used here", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip() for line in glossary.splitlines() if line.startswith("| ")}
    for word in ("T6.1", "D12.1", "cell", "round", "stand-in", "MFU", "speed_index", "NNI", "oneCCL"):
        assert any(word in row for row in rows), word


def test_make_install_silences_setuptools_editable_install_warning(tmp_path):
    """setuptools warns at an editable build that folders named like the package may be imported
    instead of it; here they are the package. The filter `make install` sets is the one that
    silences it (built from a copy of the project, installing nothing)."""
    dry = subprocess.run(["make", "-n", "install"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    pip_line = next(line for line in dry.splitlines() if "pip install" in line and "-e" in line)
    match = re.search(r'PYTHONWARNINGS="([^"]+)"', pip_line)
    assert match, f"make install's pip line sets no warning filter: {pip_line}"
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    for package in ("harness", "experiments"):
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheel = str(tmp_path / "wheel")
    build = [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_editable({wheel!r})"]
    (tmp_path / "wheel").mkdir()
    unfiltered = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert "Editable installation" in unfiltered.stderr   # the warning this filter is for, still raised
    shutil.rmtree(tmp_path / "wheel")
    (tmp_path / "wheel").mkdir()
    filtered = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONWARNINGS": match.group(1)})
    assert filtered.returncode == 0 and "Editable installation" not in filtered.stderr, filtered.stderr[-2000:]
