"""`harness` command line: run one experiment, run a sweep or a study, report a sweep, list what exists, open the UI.

Every user mistake ends as one sentence on stderr and exit status 2; a sweep in which some cells
failed at run time exits 1 after recording them; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Sequence

from harness.errors import UserError

EXIT_USAGE, EXIT_FAILED_CELLS, EXIT_INTERRUPTED = 2, 1, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of argparse's usage block
        raise UserError(f"{message} (see `{self.prog} --help`).")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, "
                                               "else sqlite:///mlruns/mlflow.db in the project)")
    sets = argparse.ArgumentParser(add_help=False)
    sets.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config field (repeatable); in a sweep, KEY=[a,b] makes it an axis")

    parser = _Parser(prog="harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", parents=[common, sets], help="run one experiment once and log it")
    p.add_argument("experiment")

    p = sub.add_parser("sweep", parents=[common, sets], help="run a sweep (grid) and log every cell")
    p.add_argument("sweep", help="sweep name (see `harness list`) or path of a sweep .toml file")
    p.add_argument("--scale", default="full", help="smoke | quick | full (the document's scale)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_worker_args(p)

    p = sub.add_parser("study", parents=[common, sets], help="run (or resume) an Optuna study and log every trial")
    p.add_argument("study", help="study name (see `harness list`) or path of a study_*.toml file")
    p.add_argument("--scale", default="full", help="smoke | quick | full (the document's scale)")
    p.add_argument("--n-trials", type=int, help="finished trials the study should reach (default: the file's, per scale)")
    p.add_argument("--timeout", type=float, help="start no new trial after this many seconds")
    p.add_argument("--status", action="store_true", help="show trials done, running, failed, pruned and the best so far")
    p.add_argument("--out", help="folder for the study's .md, .csv and .png (default: reports/)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_worker_args(p)

    p = sub.add_parser("report", parents=[common], help="table and plot of a sweep beside the published "
                       "figures; without a sweep, reports/REPRODUCTION.md over every sweep")
    p.add_argument("sweep", nargs="?")
    p.add_argument("--scale", help="which scale's cells to report (default: the latest run's)")
    p.add_argument("--out", help="folder for the .md, .csv and .png (default: reports/)")

    p = sub.add_parser("list", parents=[common], help="experiments, models, datasets, sweeps and config fields")

    p = sub.add_parser("ui", parents=[common], help="serve the MLflow UI on 127.0.0.1 over the store")
    p.add_argument("--port", type=int, default=5000)
    return parser


def _add_worker_args(p) -> None:
    p.add_argument("--workers", type=int, default=1, help="worker processes on this machine (default 1)")
    p.add_argument("--storage", help="database the workers share: sqlite:///file.db (one machine; default "
                                     "optuna.db beside the MLflow store) or postgresql://user:pw@host/db")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # INDEX:TOKEN[:PARENT], given by the launcher


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as err:
        print(f"harness: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("harness: interrupted; finished cells are kept, the interrupted one reruns next time.", file=sys.stderr)
        return EXIT_INTERRUPTED


def _overrides(sets: list[str]) -> dict:
    from harness.config import parse_assignment

    return dict(parse_assignment(s) for s in sets)


def _store(args):
    from harness.tracking import Store

    return Store(args.tracking_uri)


def cmd_run(args) -> int:
    from experiments import check_reads
    from harness.config import make_config
    from harness.sweep import run_single
    from harness.tracking import OK

    overrides = _overrides(args.sets)
    if any(isinstance(v, list) for v in overrides.values()):
        raise UserError("`harness run` takes single values; use `harness sweep` for lists.")
    check_reads(args.experiment, overrides)  # a field the experiment ignores would change nothing
    cfg = make_config({**overrides, "experiment": args.experiment})
    result = run_single(cfg, _store(args))
    if result.outcome != OK:
        # A skip (no GPU here, backend missing) is the user's request not fitting this machine.
        raise UserError(f"{args.experiment} {result.outcome}: {result.reason}")
    for key, value in result.metrics.items():
        print(f"{key:>22}: {value:.6g}")
    print(f"logged as run {result.run_id}")
    return 0


def cmd_sweep(args) -> int:
    from experiments import check_reads
    from harness import sweepspec
    from harness.sweep import run_sweep

    spec = sweepspec.load(args.sweep)
    check_reads(spec.experiment, _overrides(args.sets))  # here, before any worker is started
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {args.workers}).")
    if args.workers > 1 or args.storage or args.worker:
        from harness.cli_shared import sweep_shared

        result = sweep_shared(args, spec, _store(args), _overrides(args.sets))
        if result is None:
            return EXIT_USAGE
    else:
        store = _store(args)
        result = run_sweep(spec, store, scale=args.scale, overrides=_overrides(args.sets),
                           show_progress=not args.no_progress)
    print(_summary(result, spec.report.get("metrics")))
    if any(r.outcome == "failed" and r.cell.config is None for r in result.results):
        return EXIT_USAGE
    return EXIT_FAILED_CELLS if result.count("failed") else 0


def _summary(result, metrics: list[str] | None = None) -> str:
    """One line per cell with the first three metrics of the sweep's report (default: time,
    accuracy, parameters), then the counts."""
    metrics = (metrics or ["train_time_s", "test_accuracy", "param_count"])[:3]
    widths = [max(len(m), 10) for m in metrics]
    lines = [f"{'cell':<24} {'outcome':<8} " + " ".join(f"{m:>{w}}" for m, w in zip(metrics, widths)) + "  note"]
    for r in result.results:
        values = " ".join(_cell_value(r.metrics.get(m, float("nan")), w) for m, w in zip(metrics, widths))
        lines.append(f"{r.cell.label:<24} {r.outcome:<8} {values}  {r.reason or ''}")
    counts = ", ".join(f"{n} {o}" for o in ("ok", "reused", "skipped", "failed", "busy", "elsewhere", "not run")
                       if (n := result.count(o)))
    lines.append(f"sweep {result.name} ({result.scale}): {len(result.results)} cells: {counts}, "
                 f"in {result.seconds:.0f} s; parent run {result.parent_run_id}; "
                 f"report: harness report {result.name}")
    return "\n".join(lines)


def cmd_study(args) -> int:
    from harness.cli_shared import study

    return study(args, _store(args), _overrides(args.sets))


def _cell_value(value: float, width: int) -> str:
    if value == value and float(value).is_integer() and abs(value) >= 1e5:  # counts: every digit
        return f"{value:>{width}.0f}"
    return f"{value:>{width}.6g}"


def cmd_report(args) -> int:
    from pathlib import Path

    from harness import report, sweepspec
    from harness.reproduction import write_reproduction

    out_dir = Path(args.out) if args.out else report.REPORTS_DIR
    if args.sweep is None:
        path, summary = write_reproduction(_store(args), out_dir)
        print(f"written: {path}\nsummary: {summary}")
        return 0
    spec = sweepspec.load(args.sweep)
    store = _store(args)
    built = report.build(store, spec, args.scale)
    paths = report.write(built, store, out_dir)
    print(built.markdown)
    print("written: " + ", ".join(str(p) for p in paths))
    return 0


def cmd_list(args) -> int:
    import experiments
    from harness import sweepspec
    from harness.config import field_help
    from harness.data import DATASETS
    from harness.models import MODELS

    print("experiments:")
    for name in experiments.names():
        print(f"  {name:<16} {experiments.get(name).title}")
    print("sweeps (harness sweep NAME --scale smoke|quick|full):")
    for name in sweepspec.available():
        print(f"  {name:<16} {sweepspec.load(name).title}")
    from harness import studyspec

    print("studies (harness study NAME --scale smoke|quick|full [--n-trials N] [--workers K]):")
    for name in studyspec.available():
        print(f"  {name:<16} {studyspec.load(name).title}")
    print("models:")
    for name, spec in MODELS.items():
        print(f"  {name:<16} {spec.description}")
    print(f"datasets: {', '.join(DATASETS)}")
    print("config fields (--set KEY=VALUE):")
    for name, default, text in field_help():
        print(f"  {name:<16} {default:<10} {text}")
    return 0


def cmd_ui(args) -> int:
    store = _store(args)  # validates the URI and creates the SQLite file if needed
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store.uri,
               "--host", "127.0.0.1", "--port", str(args.port)]
    print(f"MLflow UI on http://127.0.0.1:{args.port} over {store.uri} (Ctrl-C stops it)", flush=True)
    os.execv(sys.executable, command)
    return 0


COMMANDS = {"run": cmd_run, "sweep": cmd_sweep, "study": cmd_study, "report": cmd_report, "list": cmd_list, "ui": cmd_ui}


def entry() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    sys.exit(main())
