"""make airbench-ladder (benchmarks/jpeg_ladder.py, benchmarks/ladder_fit.py): a digits ladder at smoke
scale through the real script into a temporary store, the source's quality read from its tables, the
refusals, and the fit on lines whose answer is known."""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.folders import REPO_ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # a dataclass reads its module back from sys.modules
    spec.loader.exec_module(module)
    return module


jpeg_ladder = _load("jpeg_ladder")
ladder_fit = _load("ladder_fit")


def digits_folders(root: Path, quality: int = 95) -> Path:
    """scikit-learn's digits as JPEG class folders at 32x32 (a quarter of them test/): deterministic."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        folder = root / ("test" if i % 4 == 0 else "train") / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray((pixels * 255 / 16).astype(np.uint8)).resize((32, 32), Image.Resampling.BILINEAR)
        image.convert("RGB").save(folder / f"{i:04d}.jpg", quality=quality)
    return root


@pytest.fixture(scope="module")
def digits_jpegs(tmp_path_factory) -> Path:
    """digits_folders at quality 95, written once for the tests that only read it (the ladder's rungs,
    caches and stores go to each test's own folder)."""
    return digits_folders(tmp_path_factory.mktemp("digits-jpegs") / "digits")


def _ladder(tmp_path: Path, source: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "jpeg_ladder.py"), "--data-dir", str(source),
                           "--scale", "smoke", "--cache", str(tmp_path / "rungs"), "--out", str(tmp_path / "out"),
                           "--tracking-uri", f"sqlite:///{tmp_path}/store/mlflow.db", *args],
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_digits_ladder_loses_accuracy_with_quality_and_resumes_from_its_store(digits_jpegs, tmp_path):
    source = digits_jpegs
    done = _ladder(tmp_path, source, "--seeds", "1", "--qualities", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "out" / "ladder.csv")))
    assert list(rows[0]) == list(jpeg_ladder.FIELDS)
    ladder = {int(r["jpeg_quality"]): r for r in rows if r["fp32_pair"] == "False"}
    assert sorted(ladder) == [1, 95]      # the source's own quality, read from its tables, and the re-encoding
    assert float(ladder[1]["bytes_per_image"]) < float(ladder[95]["bytes_per_image"])
    assert float(ladder[1]["image_bytes_per_image"]) < float(ladder[95]["image_bytes_per_image"]) \
        < float(ladder[95]["bytes_per_image"])
    assert {r["experiment"] for r in rows} == {jpeg_ladder.NAME}   # no airbench sweep ran: every rung trained here
    # quality 1 keeps little more than each 8x8 block's mean: the digits get much harder to tell apart
    assert float(ladder[95]["test_accuracy"]) > float(ladder[1]["test_accuracy"]) + 0.1
    pair = [r for r in rows if r["fp32_pair"] == "True"]
    assert len(pair) == 1 and pair[0]["dtype"] == "fp32" and pair[0]["jpeg_quality"] == "95" and pair[0]["seed"] == "0"
    summary = (tmp_path / "out" / "README.md").read_text()
    assert "extrapolation" in summary and "3,072" in summary and "true fp32" in summary
    assert "Quality 1 against 95, paired by seed (n = 1: " in summary and "one seed: no interval" in summary

    from harness.store import Store

    store = Store(f"sqlite:///{tmp_path}/store/mlflow.db")
    runs = [r for r in store.runs(store.experiment_id(jpeg_ladder.NAME)) if r.finished_ok]
    assert {r.run_id for r in runs} >= {r["mlflow_run_id"] for r in rows}
    again = _ladder(tmp_path, source, "--seeds", "1", "--qualities", "1")   # everything reused, nothing trained
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["mlflow_run_id"] for r in csv.DictReader(open(tmp_path / "out" / "ladder.csv"))] \
        == [r["mlflow_run_id"] for r in rows]


def test_a_quality_at_or_above_the_sources_is_refused_in_one_sentence_before_anything_runs(tmp_path, capsys):
    source = digits_folders(tmp_path / "digits", quality=60)
    code = jpeg_ladder.main(["--data-dir", str(source), "--qualities", "75,30", "--cache", str(tmp_path / "rungs"),
                             "--out", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path}/s.db"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "quality 75 is not below the source's own (60)" in error and "\n" not in error
    assert not (tmp_path / "rungs").exists() and not (tmp_path / "s.db").exists()
    for bad, words in (("60,x", "whole numbers"), ("0", "from 1 to 100")):
        assert jpeg_ladder.main(["--data-dir", str(source), "--qualities", bad]) == 2
        assert words in capsys.readouterr().err
    assert jpeg_ladder.main(["--data-dir", str(tmp_path / "nothing"), "--qualities", "30"]) == 2
    assert "holds no JPEG images" in capsys.readouterr().err


def test_the_sources_quality_is_read_from_its_quantisation_tables_and_a_rung_is_written_once(digits_jpegs, tmp_path):
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    for quality in (95, 75, 40, 10):
        image.save(tmp_path / f"q{quality}.jpg", quality=quality)
        assert jpeg_ladder.source_quality(tmp_path / f"q{quality}.jpg") == quality
    source = digits_jpegs
    size = jpeg_ladder.reencode(source, tmp_path / "q20", 20)
    files = jpeg_ladder.images(tmp_path / "q20")
    assert len(files) == len(jpeg_ladder.images(source)) and size == jpeg_ladder.bytes_per_image(files)
    assert jpeg_ladder.source_quality(files[0]) == 20
    files[0].unlink()   # a finished rung is reused as it is, not rebuilt
    assert jpeg_ladder.reencode(source, tmp_path / "q20", 20) == size


def test_image_bytes_leave_out_the_headers_which_are_the_same_size_at_every_quality(tmp_path):
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    sizes = {}
    for quality in (95, 30):
        image.save(tmp_path / f"q{quality}.jpg", quality=quality)
        data = (tmp_path / f"q{quality}.jpg").read_bytes()
        sizes[quality] = (len(data), jpeg_ladder.image_bytes(data))
    headers = {q: whole - scan for q, (whole, scan) in sizes.items()}
    assert headers[95] == headers[30] > 500          # two quantisation and four Huffman tables, and the rest
    assert 0 < sizes[30][1] < sizes[95][1]
    assert jpeg_ladder.image_bytes(b"not a jpeg") == len(b"not a jpeg")


@pytest.mark.slow
def test_the_top_rung_is_the_airbench_sweeps_own_runs_when_each_trained_to_its_last_epoch(digits_jpegs, tmp_path):
    from harness.store import Outcome, Store
    from harness.sweeps.sweep_engine import run_sweep

    source = str(digits_jpegs)
    store = Store(f"sqlite:///{tmp_path}/store/mlflow.db")
    assert jpeg_ladder.sweep_top_rung(store, "smoke", source, 1) is None     # the sweep has not run
    (cell,) = run_sweep(jpeg_ladder.airbench94("smoke", [source]), store, scale="smoke",
                        overrides={"dataset": "imagefolder"}, repeats=1, show_progress=False).results
    assert cell.outcome == Outcome.OK
    epochs = cell.cell.values["airbench_epochs"]
    # the selection rule on the run's recorded epochs: trained to the end, then stopped halfway
    store.log_metrics(cell.run_id, {"epochs_trained": epochs}, step=1)
    assert [run.run_id for _, run in jpeg_ladder.sweep_top_rung(store, "smoke", source, 1)] == [cell.run_id]
    assert jpeg_ladder.sweep_top_rung(store, "smoke", source, 2) is None     # its seed 1 never ran
    store.log_metrics(cell.run_id, {"epochs_trained": epochs / 2}, step=2)
    assert jpeg_ladder.sweep_top_rung(store, "smoke", source, 1) is None     # stopped at its target: not the same run


def test_the_fit_recovers_a_known_line_and_says_raw_pixels_are_an_extrapolation():
    rng = np.random.default_rng(1)
    sizes = [300.0] * 3 + [500.0] * 3 + [900.0] * 3
    accuracy = [0.5 + 0.05 * math.log(s) + rng.normal(0, 0.002) for s in sizes]
    found = ladder_fit.fit(sizes, accuracy)
    truth = 0.5 + 0.05 * math.log(ladder_fit.RAW_BYTES)
    assert found.slope == pytest.approx(0.05, abs=0.01) and found.extrapolated
    assert found.interval[0] < found.at_raw < found.interval[1] and abs(found.at_raw - truth) < 0.01
    assert found.interval[1] - found.interval[0] < 0.03
    noisier = ladder_fit.fit(sizes, [a + rng.normal(0, 0.02) for a in accuracy])
    assert noisier.interval[1] - noisier.interval[0] > found.interval[1] - found.interval[0]
    rows = [{"jpeg_quality": q, "bytes_per_image": s + 625, "image_bytes_per_image": s, "seed": i % 3,
             "test_accuracy": a, "fp32_pair": False, "dtype": "fp32", "experiment": "airbench"}
            for i, (q, s, a) in enumerate(zip([75] * 3 + [50] * 3 + [20] * 3, sizes, accuracy))]
    text = ladder_fit.summary(found, rows, 75, "cpu-fp32")
    assert "**extrapolation**" in text and f"{100 * found.at_raw:.2f}%" in text
    assert "the runs train in fp32 already" in text and "`airbench` sweep's own cells" in text
    # each rung against the top one (quality 75, here the smallest), paired by seed: 0.05 ln(900/300) = +5.5 points
    drop = [a - b for a, b in zip(accuracy[6:], accuracy[:3])]
    assert f"Quality 20 against 75, paired by seed (n = 3: {', '.join(f'{100 * d:+.2f}' for d in drop)} points): " \
        f"median **{100 * sorted(drop)[1]:+.2f} points** [" in text
    assert "nothing tests its form" not in text
    two = [r for r in rows if r["jpeg_quality"] != 50]
    two_fit = ladder_fit.fit([r["image_bytes_per_image"] for r in two], [r["test_accuracy"] for r in two])
    assert "nothing tests its form" in ladder_fit.summary(two_fit, two, 75, "cpu-fp32")
    with pytest.raises(ValueError, match="at least two rungs"):
        ladder_fit.fit([900.0, 900.0], [0.9, 0.91])


def _rows(accuracy_at, noise=0.001, seeds=3):
    """A three-rung ladder (image bytes 150, 220, 300; qualities 30, 50, 75) whose runs sit on the
    curve `accuracy_at(bytes)` with seeded noise."""
    rng = np.random.default_rng(2)
    return [{"jpeg_quality": q, "bytes_per_image": b + 625, "image_bytes_per_image": b, "seed": seed,
             "test_accuracy": accuracy_at(b) + rng.normal(0, noise), "fp32_pair": False, "dtype": "fp32",
             "experiment": "airbench" if q == 75 else "airbench-jpeg-ladder"}
            for q, b in ((75, 300.0), (50, 220.0), (30, 150.0)) for seed in range(seeds)]


def _summary(rows):
    found = ladder_fit.fit([r["image_bytes_per_image"] for r in rows], [r["test_accuracy"] for r in rows])
    return ladder_fit.summary(found, rows, 75, "cpu-fp32")


def test_a_middle_rung_tests_the_lines_form_against_the_chord_of_its_neighbours():
    # gains that flatten with the bytes (concave in ln bytes): the middle rung sits above the chord
    concave = _rows(lambda b: 0.9 - 100.0 / b)
    found = ladder_fit.bend(concave, 30, 50, 75)
    w = (math.log(220) - math.log(150)) / (math.log(300) - math.log(150))
    truth = (0.9 - 100 / 220) - ((0.9 - 100 / 150) + w * ((0.9 - 100 / 300) - (0.9 - 100 / 150)))
    assert truth > 0.02 and found.median == pytest.approx(truth, abs=0.005) and found.low > 0
    text = _summary(concave)
    assert "Quality 50 against the chord from 30 to 75 (n = 3: " in text and ": above the chord." in text
    assert "nothing tests its form" not in text
    # a straight line in ln bytes: on the chord
    assert ": on the chord within its interval." in _summary(_rows(lambda b: 0.5 + 0.05 * math.log(b)))
    # gains that steepen with the bytes: below
    assert ": below the chord." in _summary(_rows(lambda b: 0.3 + 0.002 * b))
    # one seed: the figure, no verdict
    assert "(one seed: no interval, no verdict on the form)" in _summary(_rows(lambda b: 0.9 - 100.0 / b, seeds=1))
    # two rungs: nothing to test
    assert ladder_fit._bends([r for r in concave if r["jpeg_quality"] != 50]) == []
