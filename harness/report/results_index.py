"""results/README.md, the first page of results/: every table's newest verdict with its host and the
command that measures it again, then every folder of results with what it holds, its host, when and
how it was measured, its headline verdicts, and how to recompute and rerun it.

It is written from the folders themselves (`make results-index`): a folder of results is any folder
under results/ with a store/ of its own, so a folder added is on the page at the next run, whatever
it holds (tables, a study, calibrated targets); tests/test_results_index.py fails when the committed
page is not what the folders give. What it reads: each folder's verdicts.csv (harness/report/
verdict_file.py) for its tables, its study's race page, its targets' JSON files, its README's title,
and the tags its store's runs logged (read-only) for the host, the dates, the procedure and the code.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness.folders import RESULTS_DIR
from harness.machine.fingerprint import machine_text
from harness.report import reruns, verdict_file
from harness.report.render import peak_under_load
from harness.fields.config import SEEDED_ROUNDS_FROM

DATA_DIR = "../shared/data/cifar10-jpeg"   # where the project's docs keep the JPEG CIFAR-10 (docs/RUNNING.md)
PEAK = re.compile(r"^([0-9.]+) TFLOP/s")


@dataclass
class Folder:
    path: Path                                          # under root
    root: Path = RESULTS_DIR                            # the results/ folder the page is the first page of
    title: str = ""                                     # its README's first heading
    tables: list[dict] = field(default_factory=list)    # verdicts.csv lines
    hosts: dict[str, dict] = field(default_factory=dict)   # fingerprint -> tags of one of its runs
    runs: Counter = field(default_factory=Counter)      # fingerprint -> runs
    days: tuple[str, str] = ("", "")
    kinds: Counter = field(default_factory=Counter)     # harness.kind of its runs
    procedures: Counter = field(default_factory=Counter)
    dirty: int = 0                                      # runs from a working tree with uncommitted changes
    scales: Counter = field(default_factory=Counter)
    peaks: dict[str, list[float]] = field(default_factory=dict)   # "cpu:bf16:2t" -> TFLOP/s, taken quiet
    parts: list[Path] = field(default_factory=list)     # sub-folders without a store of their own

    @property
    def name(self) -> str:
        return self.path.relative_to(self.root).as_posix()


def folders(root: Path = RESULTS_DIR) -> list[Folder]:
    """Every folder of results under `root` (one with a store/ of its own), each read."""
    found = sorted({p.parent.parent for p in root.rglob("mlflow.db") if p.parent.name == "store"
                    and "store" not in p.parent.parent.relative_to(root).parts})
    return [_read(path, root, [f for f in found if f != path]) for path in found]


def _read(path: Path, root: Path, others: list[Path]) -> Folder:
    folder = Folder(path, root)
    readme = path / "README.md"
    if readme.exists():
        folder.title = readme.read_text().splitlines()[0].lstrip("# ").strip()
    if (path / verdict_file.NAME).exists():
        folder.tables = verdict_file.read(path / verdict_file.NAME)
    folder.parts = sorted(p for p in path.iterdir() if p.is_dir() and p.name != "store" and p not in others
                          and not (p / "store").exists() and any(p.iterdir()))
    _read_store(folder)
    return folder


def _read_store(folder: Folder) -> None:
    """What the folder's runs logged: hosts, days, kinds, procedures, code, scales, peaks."""
    uri = (folder.path / "store" / "mlflow.db").resolve().as_uri() + "?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        runs = db.execute("select run_uuid, start_time from runs where lifecycle_stage = 'active'").fetchall()
        tags: dict[str, dict] = {run: {} for run, _ in runs}
        for run, key, value in db.execute("select run_uuid, key, value from tags"):
            if run in tags:
                tags[run][key] = value
    days = sorted(_day(start) for _, start in runs if start)
    folder.days = (days[0], days[-1]) if days else ("", "")
    for run, found in tags.items():
        key = found.get("fingerprint", "unknown")
        folder.hosts.setdefault(key, found)
        folder.runs[key] += 1
        folder.kinds[found.get("harness.kind", "run")] += 1
        folder.dirty += found.get("git.dirty") == "true"
        if "harness.procedure" in found:
            folder.procedures[int(found["harness.procedure"])] += 1
        if "harness.scale" in found:
            folder.scales[found["harness.scale"]] += 1
        measured = found.get("harness.note.peak_measured", "")
        figure = PEAK.match(measured)
        if figure and found.get("harness.note.peak_key") and not peak_under_load(measured):
            folder.peaks.setdefault(found["harness.note.peak_key"], []).append(float(figure.group(1)))


def _day(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")


# ---------------------------------------------------------------- what each folder says

def native_text(folder: Folder, tags: dict) -> str:
    """Which reduced-precision dtypes the host computes natively: by its measured peaks where the
    folder's runs measured one beside fp32's, both on a quiet machine (native: at least fp32's, as
    harness/report/measured_on.py says), else by its CPU flags."""
    said = []
    for key in sorted(folder.peaks):
        device, dtype, threads = key.split(":")
        fp32 = folder.peaks.get(f"{device}:fp32:{threads}")
        if dtype == "fp32" or not fp32:
            continue
        ratio = max(folder.peaks[key]) / max(fp32)
        said.append(f"{dtype} {'natively' if ratio >= 1 else 'slower than fp32'} (measured peak {ratio:.2g}x fp32's)")
    if not any(s.startswith("bf16") for s in said):
        bf16 = tags.get("cpu.native_bf16")
        said.append("bf16 natively (AVX512-BF16/AMX-BF16 flag)" if bf16 == "true" else
                    "bf16 emulated through fp32 (no AVX512-BF16/AMX-BF16)" if bf16 == "false" else "bf16 unknown")
    return "fp32; " + "; ".join(said)


def host_text(folder: Folder) -> str:
    return "; ".join(f"{machine_text(tags)}, fingerprint **{key}** ({native_text(folder, tags)})"
                     for key, tags in folder.hosts.items())


def procedure_text(folder: Folder) -> str:
    """How the cells were measured: the measurement procedure (harness/fields/config.py) and seeds."""
    if folder.tables:
        by_table: dict[str, tuple[str, str]] = {}
        for line in folder.tables:
            by_table.setdefault(line["table"], (line["procedure"], line["seeds"]))
        groups: dict[tuple[str, str], list[str]] = {}
        for table, found in by_table.items():
            groups.setdefault(found, []).append(table)
        return "; ".join(f"{_procedure(int(p), s)}: {', '.join(tables)}" for (p, s), tables in sorted(groups.items()))
    return "; ".join(f"measurement procedure {p} ({n} runs)" for p, n in sorted(folder.procedures.items())) or "not logged"


def _procedure(procedure: int, seeds: str) -> str:
    """A table's measurement procedure (harness/fields/config.py) in words, with its seeds."""
    if procedure >= SEEDED_ROUNDS_FROM:
        return f"procedure {procedure}, round r trains seed r" + (f" ({seeds} seeds)" if seeds else "")
    named = f"procedure {procedure}" if procedure else "a procedure before seeds per round (its cells untagged)"
    return f"{named}, every round one seed" + (" (one seed)" if seeds else "")


def holds_text(folder: Folder) -> str:
    parts = []
    if folder.tables:
        labels = list(dict.fromkeys(line["table"] for line in folder.tables))
        parts.append(f"{len(labels)} table(s) on [REPRODUCTION.md]({folder.name}/REPRODUCTION.md): {', '.join(labels)}")
    studies = sorted(folder.path.glob("*-verify.md"))
    for page in studies:
        parts.append(f"a study with its race: [{page.stem}]({folder.name}/{page.name})")
    targets = sorted(p for p in folder.path.glob("*.json"))
    for target in targets:
        parts.append(f"a calibrated target: [{target.name}]({folder.name}/{target.name})")
    for part in folder.parts:
        parts.append(f"[{part.name}/]({folder.name}/{part.name}/README.md)")
    return "; ".join(parts) or "its store"


def headline_text(folder: Folder) -> str:
    """The folder's headline verdicts: each table's headline claim, the study's goal, each target."""
    said = [f"{line['table']} **{line['label']}** ({line['class']})" for line in folder.tables if line["headline"] == "1"]
    for page in sorted(folder.path.glob("*-verify.md")):
        said += [line.removeprefix("- ").replace("|", "/") for line in page.read_text().splitlines()
                 if line.startswith(("- goal", "- over the tuned baseline"))]
    for target in sorted(folder.path.glob("*.json")):
        found = json.loads(target.read_text())
        if "target_accuracy" in found:
            said.append(f"{found.get('study')} at scale {found.get('scale')}: target accuracy "
                        f"**{found['target_accuracy']}**, tuned lr x{found.get('lr_factor', 1):g}")
    return "; ".join(said) or "—"


def study_budget(optuna_db: Path) -> str:
    """The wall-clock budget a study in this Optuna file ran under, as --budget reads it ("2h", "1h30m"),
    or "" for a file without one (read with sqlite3 alone: the report does not load Optuna)."""
    if not optuna_db.is_file():
        return ""
    with contextlib.closing(sqlite3.connect(f"file:{optuna_db}?mode=ro", uri=True)) as db:
        row = db.execute("select value_json from study_user_attributes where key = 'harness.budget_s'").fetchone()
    if row is None:
        return ""
    hours, minutes = divmod(round(float(json.loads(row[0])) / 60), 60)
    return f"{hours}h{minutes}m" if hours and minutes else f"{hours}h" if hours else f"{minutes}m"


def rerun_text(folder: Folder) -> str:
    """One sentence: how to recompute the folder, write its pages again, and measure it again."""
    name, recompute = folder.name, f"`.venv/bin/python results/{folder.name}/recompute.py` recomputes it"
    if folder.tables:
        sweeps = ",".join(dict.fromkeys(line["sweep"] for line in folder.tables))
        scale = folder.scales.most_common(1)[0][0] if folder.scales else "cpu"
        tables = "" if name == "cpu-2core" else f" TABLES={sweeps}"
        again = (f"`make reproduce-cpu DATA_DIR={DATA_DIR} MACHINE={name}{tables}` resumes it"
                 if scale == "cpu" else
                 f"`harness reproduce --scale {scale} --data-dir {DATA_DIR} --out results/{name} --sweeps {sweeps} "
                 f"--tracking-uri sqlite:///results/{name}/store/mlflow.db` resumes it")
        return (f"{recompute}; `make reproduce-cpu-report MACHINE={name}{tables}` writes its pages again from its "
                f"store, measuring nothing; {again}")
    kinds = set(folder.kinds)
    study = next((tags.get("harness.study", "") for tags in folder.hosts.values()), "")
    target = re.sub(r"^study_", "", study.split("-")[0]).replace("_", "-")
    scale = folder.scales.most_common(1)[0][0] if folder.scales else "cpu"
    uri = f"TRACKING_URI=sqlite:///results/{name}/store/mlflow.db"
    budget = study_budget(folder.path / "store" / "optuna.db")
    if budget:   # search and race in one command, within the budget the study ran under
        return (f"{recompute}; `make study-{target} SCALE={scale} DATA_DIR={DATA_DIR} BUDGET={budget} "
                f"STORAGE=sqlite:///results/{name}/store/optuna.db {uri}` measures it again (search and race in "
                "one wall-clock budget)")
    if kinds & {"study", "verify"}:
        return (f"{recompute}; `make study-{target} SCALE={scale} DATA_DIR={DATA_DIR} {uri}` then "
                f"`make study-{target}-verify SCALE={scale} DATA_DIR={DATA_DIR} {uri}` measure it again")
    if "calibrate" in kinds:
        return f"{recompute}; `make study-{target}-calibrate SCALE={scale} DATA_DIR={DATA_DIR}` measures it again"
    return recompute


def measure_again(sweep: str, folder: Folder) -> str:
    """The command that measures one table again, at the scale the folder measured it, into a new folder."""
    scale = folder.scales.most_common(1)[0][0] if folder.scales else "cpu"
    # a new folder beside the one measured (inside the host class's folder, as the seeded reruns are)
    parent = folder.path.parent.relative_to(folder.root).as_posix()
    where = f"{folder.name}/NAME" if parent == "." else f"{parent}/NAME"
    if scale == "cpu":
        return f"`make reproduce-cpu DATA_DIR={DATA_DIR} MACHINE={where} TABLES={sweep}`"
    return (f"`harness reproduce --scale {scale} --data-dir {DATA_DIR} --out results/{where} --sweeps {sweep} "
            f"--tracking-uri sqlite:///results/{where}/store/mlflow.db`")


# ---------------------------------------------------------------- the page

def newest_tables(found: list[Folder]) -> list[tuple[dict, Folder, list[Folder]]]:
    """Each table (by sweep) once: the headline line of its newest decided measurement among the
    folders (by their newest cell; the newest measurement when none decided), that folder, and the
    other folders that measured it."""
    by_sweep: dict[str, list[tuple[dict, Folder]]] = {}
    for folder in found:
        for line in folder.tables:
            if line["headline"] == "1":
                by_sweep.setdefault(line["sweep"], []).append((line, folder))
    shown = []
    for sweep, measured in by_sweep.items():
        decided = [m for m in measured if m[0]["verdict"] in reruns.DECIDED]
        line, folder = max(decided or measured, key=lambda m: m[0]["last_cell"])
        shown.append((line, folder, [f for _, f in measured if f is not folder]))
    return shown


def page(found: list[Folder]) -> str:
    hosts = {key: (tags, folder) for folder in found for key, tags in folder.hosts.items()}
    lines = ["# Results", "",
             f"**{len(found)} folders of results, measured on {len(hosts)} hosts** (a host is one fingerprint: the "
             "CPU, its flags, the GPUs and torch; harness/machine/fingerprint.py). Every figure in a folder is computed "
             "from the store committed beside it (`store/`, MLflow in SQLite), and the folder's `recompute.py` "
             "recomputes it without the harness. Never set seconds from two hosts side by side.", "",
             "This page is written from the folders by `make results-index` (harness/report/results_index.py): a "
             "folder with a `store/` of its own is on it, and tests/test_results_index.py fails when a folder is "
             "missing from it, when it names one that is gone, or when it is not what the folders give.", "",
             "## Every table's newest verdict", "",
             "Each table's headline claim (its first document's claim judged, decided or not: "
             "harness/report/evidence.py), the newest decided verdict of it among the folders that measured the "
             "table, and its class: a **book timing** reproduces a document's timing on what the claim needs; a "
             "**stand-in** was measured without something the claim needs (cores, GPUs, the document's data or "
             "dtype); **consistency**, **exact** and **computed facts** cannot fail by the machine's noise. The "
             "last column measures the table again into a folder of its own (NAME: its store and its page; the "
             "page of the folder above then links it as measured again), on CIFAR-10 as train/ and test/ class "
             "folders of JPEGs in DATA_DIR.", "",
             "| table | headline claim | newest verdict | class | measured in | host | cells from | seeds | also measured in | measure it again |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for line, folder, others in newest_tables(found):
        lines.append(f"| {line['table']} | {_cell(line['check'])} | **{line['label']}** | {line['class']} | "
                     f"[{folder.name}/]({folder.name}/REPRODUCTION.md) | {line['machine']}, fingerprint "
                     f"{line['fingerprint']} | {_days(line['first_cell'], line['last_cell'])} | "
                     f"{line['seeds'] or '—'} | "
                     + (", ".join(f"[{o.name}/]({o.name}/REPRODUCTION.md)" for o in others) or "—")
                     + f" | {measure_again(line['sweep'], folder)} |")
    lines += ["", "## Folders", "",
              "| folder | what it holds | host | runs | measured with | headline verdicts | recompute, write again, measure again |",
              "|---|---|---|---|---|---|---|"]
    for folder in found:
        link = f"[{folder.name}/]({folder.name}/README.md)" if (folder.path / "README.md").exists() else f"{folder.name}/"
        runs = f"{sum(folder.runs.values())} runs, {_days(*folder.days)}" + (
            f"; {folder.dirty} from uncommitted code" if folder.dirty else "")
        lines.append(f"| {link}{': ' + _cell(folder.title) if folder.title else ''} | {_cell(holds_text(folder))} | "
                     f"{_cell(host_text(folder))} | {runs} | {_cell(procedure_text(folder))} | "
                     f"{_cell(headline_text(folder))} | {_cell(rerun_text(folder))} |")
    lines += ["", "## Hosts", "", "| fingerprint | machine | folders |", "|---|---|---|"]
    for key in sorted(hosts):
        lines.append(f"| {key} | {machine_text(hosts[key][0])} | "
                     + ", ".join(f"{f.name}/" for f in found if key in f.hosts) + " |")
    lines += ["", "## Names", "",
              "`cpu-2core/` holds every table a 2-core CPU runs, measured on one host; each folder inside it holds "
              "some of those tables (or a study) measured again on a host of its own, named for what it measured "
              "(`data-parallel/`, `airbench-fp32/`; a study's folder carries the study's name, `study_<name>/`). "
              "`targets/` holds the studies' calibrated targets: the study code reads them there "
              "(harness/folders.py), and every study folder that is timed to one links it.", ""]
    return "\n".join(lines)


def write(root: Path = RESULTS_DIR) -> Path:
    path = root / "README.md"
    path.write_text(page(folders(root)))
    return path


def _days(first: str, last: str) -> str:
    first, last = first[:10], last[:10]
    return first if first == last else f"{first} to {last}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


if __name__ == "__main__":
    print(f"written: {write()}")
