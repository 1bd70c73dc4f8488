"""make gpu-check: the first run on a machine with GPUs, prepared to take minutes, not hours.

    make gpu-check                                   # or: .venv/bin/python benchmarks/gpu_check.py
    .venv/bin/python benchmarks/gpu_check.py --out DIR --budget 480

1. The GPU-marked tests (`pytest -m gpu`), their outcomes read from pytest's JUnit XML; then the
   timings those tests check without a clock (benchmarks/gpu_timings.py), printed as ratios.
2. Every GPU sweep at smoke scale on CUDA, each a `harness sweep` subprocess writing to a fresh
   SQLite store in DIR: T7 (fp32 / bf16 / fp16), T10.2 (1, 2, 4, 8 GPUs: those not here are skips),
   D12.1 (torch.compile with CUDA graphs), D12.2, D12.3, D12.5, D12.6, airbench94's ladder.
3. `harness report` over that store: DIR/REPRODUCTION.md.

Then one line per sweep, read back from the tracking store (never from the printed text): cells ok /
skipped (reason) / failed (reason), our speed-ups beside the published ones, the checks' verdicts.

Nothing is downloaded: before anything runs, every cell is checked to read scikit-learn's bundled
digits or synthetic data, and no model here loads pretrained weights (random init throughout).
Steps 1 and 2 run one at a time where there are GPUs (nothing else on them while a cell is timed),
two at a time where there are none (every cell is then a skip, and the sweeps, then the report,
run one after another in a single process: one interpreter start-up instead of one for each).
Budget: 8 minutes on one GPU, 10 on several; a sweep still running when it is spent is stopped
(its finished cells stay recorded) and counts as failed. Without a GPU every cell is a skip with
its reason and the check passes in under two minutes. Exit status: 0 when nothing failed, 1
otherwise, 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OFFLINE_DATASETS = {"digits", "synthetic"}
STOP_GRACE_S = 60  # after SIGTERM a sweep closes its run and kills its ranks; then SIGKILL
TESTS = "gpu-tests"
TIMINGS = "gpu-timings"
ONE_PROCESS = "gpu-sweeps"   # without a GPU: every sweep in this one process (logs/gpu-sweeps.log, .json)
ONE_PROCESS_FLAG = "--run-in-one-process"
REPORT = "report"


@dataclass
class Sweep:
    name: str             # sweeps/NAME.toml
    table: str            # what it reproduces, for the printed line
    sets: list[str]       # --set overrides on top of its smoke scale


SWEEPS = [
    Sweep("amp", "T7 mixed precision (fp32/bf16/fp16)", ["device=cuda"]),
    Sweep("gpus", "T10.2 DDP on 1/2/4/8 GPUs", ["device=cuda", "backend=nccl"]),
    Sweep("hybridize", "D12.1 eager/script/compile (reduce-overhead)", ["device=cuda", "compile_mode=reduce-overhead"]),
    Sweep("async", "D12.2 asynchronous execution", ["device=cuda"]),
    Sweep("autoparallel", "D12.3 automatic parallelism", ["device=cuda"]),
    Sweep("autoparallel-small-ops", "D12.3 exercise 2: small products over streams", ["device=cuda"]),
    Sweep("autoparallel-cpu-gpu", "D12.3 exercise 3: CPU and GPU compute with copies", ["device=cuda"]),
    Sweep("autoparallel-dependencies", "D12.3 exercise 5: joined branches on two streams", ["device=cuda"]),
    Sweep("dp-scratch", "D12.5 data parallel from scratch vs DDP", ["device=cuda", "backend=nccl"]),
    Sweep("resnet", "D12.6 ResNet-18 on 1 vs 2 GPUs", ["device=cuda", "backend=nccl"]),
    Sweep("airbench", "airbench94 ladder (rungs 0, 5, 7; fp16 as published)", ["device=cuda", "dtype=fp16"]),
]


class UsageError(Exception):
    """A mistake in how the check was asked for: one sentence, exit 2."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return check(args)
    except UsageError as err:
        print(f"gpu-check: error: {err}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="fresh folder for the store, logs and report (default: reports/gpu-check-TIME)")
    p.add_argument("--budget", type=float, help="seconds for everything (default: 480 on one GPU, 600 on several)")
    p.add_argument("--skip-tests", action="store_true", help="run the sweeps only")
    return p


def check(args) -> int:
    started = time.monotonic()
    import torch  # counting GPUs creates no CUDA context: the subprocesses may have the GPUs to themselves

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    budget = args.budget or (480.0 if gpus <= 1 else 600.0)
    expected = _offline_cells()  # before anything is written
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / time.strftime("gpu-check-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty; give --out a new folder (each check starts from an empty store).")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{out.resolve() / 'mlflow.db'}"
    print(f"gpu-check: {gpus} GPU(s) visible to torch {torch.__version__}; budget {budget:.0f} s; output in {out}")

    def left() -> float:
        return budget - (time.monotonic() - started)

    xml = out / "gpu-tests.xml"
    jobs = {} if args.skip_tests else {  # name: (command, the most of the budget it may take)
        TESTS: ([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={xml}"], 0.4),
        TIMINGS: ([sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_timings.py")], 0.1)}
    report = ["report", "--tracking-uri", uri, "--out", str(out)]
    sweeps = {sweep.name: ["sweep", sweep.name, "--scale", "smoke", *[a for s in sweep.sets for a in ("--set", s)],
                           "--tracking-uri", uri, "--no-progress"] for sweep in SWEEPS}
    if gpus:  # each sweep a process of its own, as a user runs it: no CUDA state carried from one to the next
        jobs.update({name: ([_harness(), *argv], 1.0) for name, argv in sweeps.items()})
    else:  # every cell a skip decided at start-up: one process runs them all, instead of one start-up each
        plan = out / "logs" / f"{ONE_PROCESS}.json"
        plan.write_text(json.dumps({"logs": str(out / "logs"), "runs": {**sweeps, REPORT: report}}))  # the report last
        one = ([sys.executable, str(Path(__file__).resolve()), ONE_PROCESS_FLAG, str(plan)], 1.0)
        jobs = {ONE_PROCESS: one, **jobs}  # the longest first: the tests and the timings run beside it
    # With GPUs one job at a time: two on the same GPUs would time each other's contention. Without,
    # every cell is a skip decided at start-up, and two at once halve the wait.
    with ThreadPoolExecutor(max_workers=1 if gpus else 2) as pool:
        running = {name: pool.submit(lambda n, c, share: _run(n, c, out, min(left(), share * budget)), name, *job)
                   for name, job in jobs.items()}
        exits = {name: future.result() for name, future in running.items()}
    if ONE_PROCESS in exits:
        exits.update(_one_process_results(out, [*sweeps, REPORT], exits.pop(ONE_PROCESS)[0]))
    report_exit, _ = exits.pop(REPORT, (None, 0.0))
    if not isinstance(report_exit, int):  # not ended there (with GPUs, or cut short): in a process of its own
        report_exit, _ = _run(REPORT, [_harness(), *report], out, max(left(), 30))
    took = {name: seconds for name, (_, seconds) in exits.items()}
    exits = {name: status for name, (status, _) in exits.items()}

    failed = False
    if not args.skip_tests:
        failed = not _gpu_tests(xml, exits[TESTS], out)
        failed |= not _timings(exits[TIMINGS], out)
    from harness.store import Store  # read only once every subprocess has ended

    store = Store(uri)
    for sweep in SWEEPS:
        failed |= not _summarise(store, sweep, *expected[sweep.name], exits[sweep.name], took[sweep.name])
    print(f"report: {out / 'REPRODUCTION.md'}" + ("" if report_exit == 0 else f" (harness report: {report_exit})"))
    failed |= report_exit != 0
    seconds = time.monotonic() - started
    print(f"gpu-check {'FAILED' if failed else 'passed'} in {seconds:.0f} s (budget {budget:.0f} s); "
          f"MLflow UI: harness ui --tracking-uri {uri}")
    return 1 if failed or seconds > budget else 0


def _harness() -> str:
    return str(Path(sys.executable).parent / "harness")


def _offline_cells() -> dict[str, tuple[object, set[str]]]:
    """Each sweep's spec and smoke cells (their ids), after checking that none would download anything."""
    import experiments
    from harness.specs import sweep_spec
    from harness.fields.config import parse_assignment

    def reads_data(cfg) -> bool:  # an experiment that makes its own inputs needs no dataset
        return experiments.get(cfg.experiment).needs_dataset

    expected = {}
    for sweep in SWEEPS:
        spec = sweep_spec.load(sweep.name)
        cells = sweep_spec.expand(spec, "smoke", dict(parse_assignment(s) for s in sweep.sets))
        online = sorted({c.config.dataset for c in cells
                         if c.config and reads_data(c.config) and c.config.dataset not in OFFLINE_DATASETS})
        if online:
            raise UsageError(f"sweep {sweep.name} at smoke scale reads {', '.join(online)}, which may need a "
                             f"download; gpu-check runs offline data only ({', '.join(sorted(OFFLINE_DATASETS))}).")
        expected[sweep.name] = (spec, {c.cell_id for c in cells})
    return expected


def run_in_one_process(plan_path: str) -> int:
    """The child's side of ONE_PROCESS: each `harness ARGS` of the plan in turn through harness.cli.main,
    its output (the file descriptors, so anything a child of it prints too) in logs/NAME.log. After
    each run its exit status and wall time go to the plan's results file, so a stop keeps what ended."""
    import warnings

    from harness.cli import main as harness
    from harness.cli.exits import EXIT_INTERRUPTED

    warnings.filterwarnings("ignore", category=FutureWarning)  # as the harness command does
    plan = json.loads(Path(plan_path).read_text())
    results_path, results = Path(plan_path).with_suffix(".results.json"), {}
    for name, argv in plan["runs"].items():
        started = time.monotonic()
        with open(Path(plan["logs"]) / f"{name}.log", "wb") as log:
            status = _with_output_to(log, harness, argv)
        results[name] = [status, time.monotonic() - started]
        results_path.write_text(json.dumps(results))
        if status == EXIT_INTERRUPTED:  # the budget was spent (SIGTERM): the rest are not started
            return status
    return 0


def _with_output_to(log, function, argv: list[str]) -> int | str:
    """function(argv) with its output on `log`: file descriptors 1 and 2 (a child process's output
    too) and sys.stdout/sys.stderr (which a caller may have pointed elsewhere); its exit status, or
    what ended it."""
    import traceback

    streams = sys.stdout, sys.stderr
    for stream in streams:
        stream.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
    sys.stdout, sys.stderr = _stream_on(1), _stream_on(2)
    try:
        return function(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else int(done.code is not None)
    except Exception as err:  # a bug in one sweep: said in its log, and the next sweep still runs
        traceback.print_exc()
        return f"crashed: {type(err).__name__}"
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = streams
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        os.close(saved[0]), os.close(saved[1])


@functools.cache
def _stream_on(fd: int):
    """A text stream on file descriptor `fd`, one for the process and never closed: whatever kept a
    reference to it during one run (a logging handler, say) can still write during the next."""
    return open(fd, "w", buffering=1, closefd=False, errors="backslashreplace")


def _one_process_results(out: Path, names: list[str], status: int | str) -> dict:
    """Each run's (exit status, seconds) as the ONE_PROCESS child recorded them; a run it never
    recorded has the child's own status, or the reason it ended first (a stop when the budget was
    spent: the run it cut, which exited as interrupted, is given that reason too)."""
    from harness.cli.exits import EXIT_INTERRUPTED

    path = out / "logs" / f"{ONE_PROCESS}.results.json"
    recorded = {name: tuple(found) for name, found in (json.loads(path.read_text()) if path.exists() else {}).items()}
    stopped = isinstance(status, str)
    missing = status if stopped else f"not run: the one process ended with {status} (logs/{ONE_PROCESS}.log)"
    for name, (code, seconds) in recorded.items():
        if stopped and code == EXIT_INTERRUPTED:
            recorded[name] = (status, seconds)
    return {name: recorded.get(name, (missing, 0.0)) for name in names}


def _run(name: str, command: list[str], out: Path, seconds: float) -> tuple[int | str, float]:
    """Run one command with its output in out/logs/NAME.log: its exit status (or why it has none)
    and its wall time."""
    started = time.monotonic()
    return _wait(name, command, out, seconds), time.monotonic() - started


def _wait(name: str, command: list[str], out: Path, seconds: float) -> int | str:
    if seconds <= 0:
        return "not started: the budget was spent"
    with open(out / "logs" / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the sweep records the cell as interrupted and kills its ranks
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return f"stopped after {seconds:.0f} s: the budget was spent"


def _gpu_tests(xml: Path, status: int | str, out: Path) -> bool:
    """Print the GPU tests' line from pytest's JUnit XML; False when one failed or none ran."""
    if not xml.exists():
        print(f"GPU tests: no result ({status}); see {out / 'logs' / 'gpu-tests.log'}")
        return False
    counts, skipped, failed = Counter(), Counter(), []
    for case in ET.parse(xml).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            counts["failed"] += 1
            failed.append(f"{case.get('name')}: {(problem.get('message') or '').splitlines()[0][:200]}")
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
            skipped[(case.find("skipped").get("message") or "").removeprefix("Skipped: ")] += 1
        else:
            counts["passed"] += 1
    ended = "" if status in (0, 1, 5) else f"; pytest: {status} (logs/{TESTS}.log)"  # 1: tests failed (counted)
    print(f"GPU tests: {counts['passed']} passed, {counts['skipped']} skipped{_reasons(skipped)}, "
          f"{counts['failed']} failed{_reasons(Counter(failed))}{ended}")
    return counts["failed"] == 0 and status in (0, 5)  # 5: pytest collected no GPU test


def _timings(status: int | str, out: Path) -> bool:
    """Print the timing lines gpu_timings.py wrote to its log; False when it did not end well."""
    log = out / "logs" / f"{TIMINGS}.log"
    lines = [line for line in (log.read_text().splitlines() if log.exists() else [])
             if line.startswith("gpu timings:")]
    for line in lines:
        print(line)
    if status != 0 or not lines:
        print(f"gpu timings: no result ({status}); see {log}")
        return False
    return True


def _summarise(store, sweep: Sweep, spec, expected: set[str], exit_status: int | str, seconds: float = 0.0) -> bool:
    """Print the sweep's line from the store; False when a cell failed or the sweep did not end well."""
    records = store.cell_records(store.experiment_id(spec.name), spec.name)
    outcomes: dict[str, Counter] = {"ok": Counter(), "skipped": Counter(), "failed": Counter()}
    for cell_id in expected:
        latest = records.get(cell_id)
        if not latest:
            outcomes["failed"]["not run"] += 1
            continue
        record = latest[0]  # newest first; a fresh store holds one per cell
        outcome = record.outcome if record.outcome in ("ok", "skipped") else "failed"
        outcomes[outcome][record.reason or record.outcome or record.status.lower()] += 1
    # harness sweep exits 1 when cells failed (counted above); anything else is worth a look at its log
    expected_exit = 1 if outcomes["failed"] else 0
    ended = "" if exit_status == expected_exit else f"; harness sweep: {exit_status} (logs/{sweep.name}.log)"
    print(f"{sweep.name:<13} {sweep.table}: {sum(outcomes['ok'].values())} ok, "
          f"{sum(outcomes['skipped'].values())} skipped{_reasons(outcomes['skipped'])}, "
          f"{sum(outcomes['failed'].values())} failed{_reasons(outcomes['failed'])}{ended} [{seconds:.0f} s]")
    if outcomes["ok"]:
        for line in _speedups(store, spec):
            print(f"{'':<13}   {line}")
    return not outcomes["failed"] and not ended


def _reasons(reasons: Counter) -> str:
    if not reasons:
        return ""
    return " (" + "; ".join(f"{n}x {why}" if n > 1 else why for why, n in reasons.most_common()) + ")"


def _speedups(store, spec) -> list[str]:
    """Our speed-ups beside the published ones, and the checks' verdicts, from harness.report."""
    from harness.report import tables as report
    from harness.errors import UserError

    try:
        built = report.build(store, spec, "smoke")
    except UserError as err:
        return [f"no table: {err}"]
    table, axes = built.table, spec.axes()
    lines = []
    if "speedup" in table:
        for _, row in table[table["speedup"].notna()].iterrows():
            label = " ".join(f"{a}={row[a]}" for a in axes if a in row)
            book = row.get("book_speedup")
            lines.append(f"speed-up {label}: {row['speedup']:.2f}x"
                         + (f" (published {book:.2f}x)" if book is not None and book == book else " (none published)"))
    if built.verdicts:
        lines.append("checks: " + "; ".join(f"{v.verdict} {v.check} ({v.detail})" for v in built.verdicts))
    return lines


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    if sys.argv[1:2] == [ONE_PROCESS_FLAG]:  # the child check() starts where there is no GPU
        sys.exit(run_in_one_process(sys.argv[2]))
    sys.exit(main())
