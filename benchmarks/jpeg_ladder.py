"""make airbench-ladder DATA_DIR=...: how much of airbench94's gap to 94% the JPEG stand-in explains.

CIFAR-10 here is JPEG class folders (DATA_DIR/train/<class>/*.jpg and test/), not the raw arrays the
paper trained on. This script measures what compression costs:

1. the rungs: the data as it is (the top rung; its JPEG quality read from its quantisation tables)
   and the same images re-encoded at each lower quality (default 60, 45, 30, 15), into a cache outside
   the checkout (HARNESS_CACHE_DIR/jpeg-ladder/, or --cache), written once and reused; each rung's
   bytes per image is the mean file size of its training and test images, and its image bytes the
   mean size of their compressed image data alone (the scan: what a file holds after its headers).
   The fit reads the image bytes: a 32x32 file spends about 625 bytes on headers (quantisation and
   Huffman tables) that are the same size at every quality, two thirds of the source's 921-byte
   files, so file sizes would understate how much each rung compresses. A quality at or above the
   source's is refused: re-encoding cannot put back what the source's compression took, so such a rung
   would add bytes without information;
2. airbench94 as published trains on every rung with N seeds (default 3) through the harness, as the
   `airbench` sweep's cells at --scale (cpu: its `cpu` scale; cpu-fp32: the same in true fp32; smoke:
   its smoke settings on the folders) without their checks during training, plus, at a scale whose
   dtype is not fp32, one run with fp32 autocast off (true fp32) on the top rung at the first seed,
   paired with that seed's run. Every run is an MLflow run in the store (experiment
   `airbench-jpeg-ladder`); a finished one is reused, so the script resumes where it was cut off.
   The top rung is not trained again when the store holds the `airbench` sweep's own airbench94
   cells at this scale on the source data with every seed, each trained to its last epoch: they are
   the same runs (the sweep's checks evaluate a copy of the test set in eval mode between steps and
   draw no random numbers, so the training is the same; tests/test_airbench.py shows it);
3. --out/ladder.csv (jpeg_quality, bytes_per_image, image_bytes_per_image, seed, test_accuracy,
   test_accuracy_no_tta, dtype, fp32_pair, train_time_s, experiment, mlflow_run_id per run) and
   --out/README.md: each rung against the top one paired by seed, and the fit of accuracy against
   ln(image bytes per image) with its prediction for raw pixels and a bootstrap interval
   (benchmarks/ladder_fit.py), marked an extrapolation.

    make airbench-ladder DATA_DIR=/work/shared/data/cifar10-jpeg           # at scale cpu: hours
    python benchmarks/jpeg_ladder.py --data-dir DIR --scale smoke --seeds 1 --out /tmp/ladder

Each run at scale cpu is airbench94's 9.9 epochs (about 8-10 minutes of training on 2 idle cores)
and one test-time-augmented evaluation at the end (no checks during training: the 94% target of the
sweep's cells is dropped here), so the default ladder (5 rungs x 3 seeds + the fp32 run) is an
estimated 2.5-3.5 hours on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import ladder_fit  # noqa: E402
from harness import folders  # noqa: E402
from harness.errors import UserError  # noqa: E402

NAME = "airbench-jpeg-ladder"        # the MLflow experiment of the ladder's runs
QUALITIES = (60, 45, 30, 15)
IMAGE_SUFFIXES = (".jpg", ".jpeg")
DONE = "ladder-rung.json"            # written last in a rung's folder: a rung without it is rebuilt
# IJG's base luminance table (natural order): quality q scales it by 5000/q below 50, else 200 - 2q
BASE_LUMINANCE = (16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
                  14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
                  49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99)
FIELDS = ("jpeg_quality", "bytes_per_image", "image_bytes_per_image", "seed", "test_accuracy", "test_accuracy_no_tta",
          "dtype", "fp32_pair", "train_time_s", "experiment", "mlflow_run_id")
SWEEP = "airbench"                   # the sweep whose own top-rung cells the ladder reuses


def images(root: Path) -> list[Path]:
    """Every image of root's train/ and test/ class folders, in a fixed order."""
    return sorted(f for split in ("train", "test") for f in (root / split).glob("*/*") if f.suffix.lower() in IMAGE_SUFFIXES)


def ijg_table(quality: int) -> list[int]:
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    return [min(max(int((b * scale + 50) // 100), 1), 255) for b in BASE_LUMINANCE]


def source_quality(path: Path) -> int | None:
    """The IJG quality whose luminance table is the image's (the closest one), None if not a JPEG."""
    from PIL import Image

    with Image.open(path) as image:
        table = list(getattr(image, "quantization", {}).get(0, []))
    if len(table) != 64:
        return None
    return min(range(1, 101), key=lambda q: sum(abs(a - b) for a, b in zip(ijg_table(q), table)))


def bytes_per_image(files: list[Path]) -> float:
    return sum(f.stat().st_size for f in files) / len(files)


def image_bytes(data: bytes) -> int:
    """A JPEG's compressed image data: its bytes after the first scan's header (SOS), less the end
    marker. What comes before (quantisation and Huffman tables, the frame header) has the same size at
    every quality and says nothing about the image. A progressive file's later scan headers are
    counted as data: a few bytes. A file with no scan counts whole."""
    at = 2                                        # after SOI
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker, length = data[at + 1], int.from_bytes(data[at + 2:at + 4], "big")
        if marker == 0xDA:                        # SOS: the entropy-coded data follows its header
            end = len(data) - 2 if data[-2:] == b"\xff\xd9" else len(data)
            return max(end - (at + 2 + length), 0)
        at += 2 + length
    return len(data)


def image_bytes_per_image(files: list[Path]) -> float:
    return sum(image_bytes(f.read_bytes()) for f in files) / len(files)


def reencode(source: Path, target: Path, quality: int) -> float:
    """source's images re-encoded at `quality` (chroma subsampling kept) under target, written
    through a temporary folder so that a rung cut off halfway is rebuilt; returns bytes per image."""
    from PIL import Image

    done = target / DONE
    if done.exists():
        return json.loads(done.read_text())["bytes_per_image"]
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    written = []
    for f in images(source):
        out = partial / f.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(f) as image:
            image.save(out.with_suffix(".jpg"), "JPEG", quality=quality, subsampling="keep")
        written.append(out.with_suffix(".jpg"))
    size = bytes_per_image(written)
    (partial / DONE).write_text(json.dumps({"quality": quality, "source": str(source), "bytes_per_image": size}))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return size


def rungs(source: Path, cache: Path, qualities: list[int], log=print) -> tuple[int | None, list[dict[str, Any]]]:
    """The ladder's rungs, top (the data as it is) first: quality, data_dir, bytes per image."""
    files = images(source)
    if not files:
        raise UserError(f"'{source}' holds no JPEG images under train/<class>/ and test/<class>/; give --data-dir the "
                        "folder of CIFAR-10's JPEG class folders.")
    top = source_quality(files[0])
    above = [q for q in qualities if top is not None and q >= top]
    if above:
        raise UserError(f"quality {above[0]} is not below the source's own ({top}); re-encoding upwards adds bytes, "
                        f"not information: give --qualities below {top}.")
    found = [{"jpeg_quality": top or 0, "data_dir": str(source), "bytes_per_image": bytes_per_image(files),
              "image_bytes_per_image": image_bytes_per_image(files)}]
    for quality in sorted(qualities, reverse=True):
        log(f"rung q{quality}: re-encoding {len(files)} images into {cache / f'q{quality}'} (reused when there)")
        size = reencode(source, cache / f"q{quality}", quality)
        found.append({"jpeg_quality": quality, "data_dir": str(cache / f"q{quality}"), "bytes_per_image": size,
                      "image_bytes_per_image": image_bytes_per_image(images(cache / f"q{quality}"))})
    return top, found


def airbench94(scale: str, data_dirs: list[str]):
    """The airbench sweep narrowed to airbench94 (its scale's rung-7 cell) on each given folder."""
    from harness.specs import sweep_spec

    spec = sweep_spec.load(SWEEP)
    grid = {**spec.grid, **spec.scale_grids.get(scale, {})}
    rung7 = next(r for r in grid["rung"] if r.get("airbench_rung") == 7)
    return spec.model_copy(update={"grid": {}, "scale_grids": {scale: {"rung": [rung7], "data_dir": data_dirs}}})


def ladder_spec(scale: str, data_dirs: list[str]):
    """airbench94 on each rung's folder, as the ladder's own experiment, without the sweep's checks."""
    return airbench94(scale, data_dirs).model_copy(update={
        "name": NAME, "title": "airbench94 on a JPEG quality ladder", "checks": [], "published": {}, "report": {}})


def trains_in_fp32(scale: str) -> bool:
    from harness.specs import sweep_spec

    return sweep_spec.load(SWEEP).fixed(scale).get("dtype") == "fp32"


def sweep_top_rung(store, scale: str, data_dir: str, seeds: int) -> list | None:
    """The `airbench` sweep's own airbench94 cells at `scale` on `data_dir` with seeds 0..N-1 (its
    rounds), as (cell, run) pairs, when every one finished and trained to its last epoch; else None.
    Its checks only read the model between steps, so each is the run the ladder would train; a cell
    that stopped at its target (epochs_trained short of the recipe's) is not."""
    from harness.specs.sweep_spec import expand

    experiment = store.find_experiment(SWEEP)
    if experiment is None:
        return None
    cells = expand(airbench94(scale, [data_dir]), scale, {"dataset": "imagefolder"}, repeats=seeds)
    records = store.cell_records(experiment, SWEEP)
    done = [(cell, next((r for r in records.get(cell.cell_id, []) if r.finished_ok), None)) for cell in cells]
    if any(run is None or run.metrics.get("epochs_trained", 0) < cell.values["airbench_epochs"] - 1e-6
           for cell, run in done):
        return None
    return done


def train(store, scale: str, found: list[dict[str, Any]], seeds: int, log=print) -> list[dict[str, Any]]:
    """Every rung's runs (seeds 0..N-1) and, below fp32, the fp32 pair, as the ladder's rows."""
    from harness.store import Outcome
    from harness.sweeps.sweep_engine import run_sweep

    by_dir = {r["data_dir"]: r for r in found}
    top = found[0]["data_dir"]
    rows = []
    reused = sweep_top_rung(store, scale, top, seeds)
    if reused is not None:
        log(f"top rung: the {SWEEP} sweep's own {len(reused)} runs at scale {scale} on {top}, not trained again")
        rows += [_row(by_dir[top], cell.values, run.metrics, run.run_id, SWEEP, False) for cell, run in reused]
    # no checks during training: the accuracy at the end is what the fit reads, and airbench94 never
    # meets the sweep's 94% on these JPEGs (each test-time-augmented check costs a minute and a half)
    overrides = {"dataset": "imagefolder", "target_accuracy": 0.0}
    trained = [r["data_dir"] for r in found if reused is None or r["data_dir"] != top]
    runs = [(run_sweep(ladder_spec(scale, trained), store, scale=scale, overrides=overrides, repeats=seeds, log=log),
             False)]
    if not trains_in_fp32(scale):
        runs.append((run_sweep(ladder_spec(scale, [top]), store, scale=scale, overrides={**overrides, "dtype": "fp32"},
                               repeats=1, log=log), True))
    for result, pair in runs:
        for cell in result.results:
            if cell.outcome not in (Outcome.OK, Outcome.REUSED) or "test_accuracy" not in cell.metrics:
                log(f"  {cell.cell.label}: {cell.outcome} ({cell.reason}); left out of the fit")
                continue
            rows.append(_row(by_dir[cell.cell.values["data_dir"]], cell.cell.values, cell.metrics, cell.run_id,
                             NAME, pair))
    return sorted(rows, key=lambda r: (r["fp32_pair"], -r["jpeg_quality"], r["seed"]))


def _row(rung: dict[str, Any], values: dict[str, Any], metrics: dict[str, float], run_id: str, experiment: str,
         pair: bool) -> dict[str, Any]:
    return {"jpeg_quality": rung["jpeg_quality"], "bytes_per_image": round(rung["bytes_per_image"], 1),
            "image_bytes_per_image": round(rung["image_bytes_per_image"], 1), "seed": int(values.get("seed", 0)),
            "test_accuracy": metrics["test_accuracy"], "test_accuracy_no_tta": metrics.get("test_accuracy_no_tta"),
            "dtype": values.get("dtype", ""), "fp32_pair": pair, "train_time_s": metrics.get("train_time_s"),
            "experiment": experiment, "mlflow_run_id": run_id}


def write(out: Path, rows: list[dict[str, Any]], top: int | None, scale: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "ladder.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    ladder = [r for r in rows if not r["fp32_pair"]]
    found = ladder_fit.fit([r["image_bytes_per_image"] for r in ladder], [r["test_accuracy"] for r in ladder])
    (out / "README.md").write_text(ladder_fit.summary(found, rows, top, scale))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="CIFAR-10 as JPEG class folders (train/, test/)")
    parser.add_argument("--qualities", default=",".join(map(str, QUALITIES)),
                        help="JPEG qualities of the re-encoded rungs, each below the source's (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per rung (default %(default)s)")
    parser.add_argument("--scale", default="cpu", help="the airbench sweep's scale the runs take (default %(default)s)")
    parser.add_argument("--cache", help="where the re-encoded rungs go (default: HARNESS_CACHE_DIR/jpeg-ladder/)")
    parser.add_argument("--out", default="results/cpu-2core/jpeg-ladder", help="ladder.csv and README.md")
    parser.add_argument("--tracking-uri", help="the MLflow store (default: the harness's)")
    args = parser.parse_args(argv)
    try:
        qualities = _qualities(args.qualities)
        if args.seeds < 1:
            raise UserError(f"--seeds {args.seeds}: give at least 1 seed per rung.")
        source = Path(args.data_dir).resolve()
        cache = Path(args.cache) if args.cache else folders.CACHE_DIR / "jpeg-ladder" / source.name
        top, found = rungs(source, cache, qualities)
        from harness.store import Store

        rows = train(Store(args.tracking_uri), args.scale, found, args.seeds)
        write(Path(args.out), rows, top, args.scale)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {Path(args.out) / 'ladder.csv'} and {Path(args.out) / 'README.md'}")
    return 0


def _qualities(text: str) -> list[int]:
    try:
        qualities = [int(q) for q in text.split(",") if q.strip()]
    except ValueError:
        raise UserError(f"--qualities {text}: give whole numbers separated by commas, like 60,45,30,15.") from None
    if not qualities or any(not 1 <= q <= 100 for q in qualities):
        raise UserError(f"--qualities {text}: each quality must be a whole number from 1 to 100.")
    return qualities


if __name__ == "__main__":
    sys.exit(main())
