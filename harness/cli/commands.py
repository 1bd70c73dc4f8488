"""What each `harness` subcommand does, in a few lines each: parse the user's values, call the
engine, print, return the exit status."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from harness.errors import StoreFault, UserError, first_line

EXIT_FAILED_CELLS = 1


def _overrides(sets: list[str]) -> dict:
    from harness.config import parse_assignment

    return dict(parse_assignment(s) for s in sets)


def _store(args):
    from harness.store import Store

    return Store(args.tracking_uri)


def _out_dir(given: str | None, default: Path | None) -> Path:
    """The folder reports are written to, made and tried now: a file in the way, or a folder that
    cannot be made or written, is the user's to fix before anything is read or run."""
    from harness.store.probe import check_folder_writable

    folder = Path(given) if given else default
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file, not a folder; give a folder for the report files.")
    check_folder_writable(folder, "the report folder")
    return folder


def _workers(args) -> int:
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {args.workers}).")
    return args.workers


SLURM_OPTIONS = {"slurm_partition": "partition", "slurm_time": "time", "slurm_gpus_per_task": "gpus_per_task",
                 "slurm_cpus_per_task": "cpus_per_task"}


def _launcher(args):
    """The launcher the options ask for (None: this process, or local workers), checked before the
    engine creates or submits anything."""
    from harness.store import resolve_db_url, resolve_tracking_uri

    given = [f"--{k.replace('_', '-')}" for k in [*SLURM_OPTIONS, "detach"] if getattr(args, k) not in (None, False)]
    if args.launcher != "slurm":
        if given and args.worker is None:
            raise UserError(f"{given[0]} needs --launcher slurm.")
        return None
    if args.worker is not None:
        return None
    from harness.launchers.slurm import SlurmLauncher

    launcher = SlurmLauncher(detach=args.detach, **{field: getattr(args, k) for k, field in SLURM_OPTIONS.items()
                                                     if getattr(args, k) is not None})
    tracking_uri = resolve_tracking_uri(args.tracking_uri)
    launcher.check(resolve_db_url(args.storage, tracking_uri), tracking_uri)
    return launcher


def cmd_run(args) -> int:
    import experiments
    from harness.cells import run_single
    from harness.config import make_config
    from harness.store import Outcome

    overrides = _overrides(args.sets)
    if any(isinstance(v, list) for v in overrides.values()):
        raise UserError("`harness run` takes single values; use `harness sweep` for lists.")
    experiments.check_reads(args.experiment, overrides)  # a field the experiment ignores would change nothing
    cfg = make_config({**overrides, "experiment": args.experiment})
    experiments.get(args.experiment).check_model(cfg.model)
    result = run_single(cfg, _store(args))
    if result.outcome != Outcome.OK:
        # A skip (no GPU here, backend missing) is the user's request not fitting this machine.
        raise UserError(f"{args.experiment} {result.outcome}: {result.reason}")
    for key, value in result.metrics.items():
        print(f"{key:>22}: {value:.6g}")
    print(f"logged as run {result.run_id}")
    return 0


def cmd_sweep(args) -> int:
    from harness.cli.summary import sweep_summary
    from harness.launchers import WorkerRole
    from harness.report import overview
    from harness.store import Outcome, resolve_db_url
    from harness.sweeps import spec as sweepspec
    from harness.sweeps.engine import run_sweep

    spec = sweepspec.load(args.sweep)
    workers, role, launcher = _workers(args), WorkerRole.decode(args.worker), _launcher(args)
    store = _store(args)
    result = run_sweep(spec, store, scale=args.scale, overrides=_overrides(args.sets),
                       db_url=resolve_db_url(args.storage, store.uri), workers=workers, launcher=launcher, role=role,
                       show_progress=not args.no_progress, log=lambda line: print(line, flush=True))
    if result.detached:
        print(f"sweep {spec.name} ({args.scale}): the workers run on; the same command again prints the "
              "summary once they are done (every cell reused)")
        return 0
    if role is None:
        print(sweep_summary(result, spec.report.get("metrics")))
        try:  # the experiment's description and the cells' speed-ups; the sweep itself is done
            overview.refresh(store, spec, args.scale)
        except StoreFault:
            raise
        except Exception as err:  # a report that cannot be built must not hide a finished sweep
            print(f"harness: warning: the MLflow overview of {spec.name} was not refreshed: {first_line(err)}",
                  file=sys.stderr)
    if any(r.outcome == Outcome.FAILED and r.cell.config is None for r in result.results):
        return 2
    # A failed cell, or one no worker reached (a worker died, or stopped on a mistake), is unfinished work.
    return EXIT_FAILED_CELLS if result.count(Outcome.FAILED) or result.count(Outcome.NOT_RUN) else 0


def cmd_study(args) -> int:
    from harness.launchers import WorkerRole
    from harness.store import resolve_db_url
    from harness.studies import engine, spec as studyspec

    spec = studyspec.load(args.study)
    workers, role = _workers(args), WorkerRole.decode(args.worker)
    for name, value, low in (("--n-trials", args.n_trials, 1), ("--timeout", args.timeout, 1e-9)):
        if value is not None and not (value >= low and math.isfinite(value)):
            raise UserError(f"{name} must be a positive finite number (got {value}).")
    out_dir = _out_dir(args.out, None) if args.out else None
    launcher = None if args.status else _launcher(args)
    store = _store(args)
    db_url = resolve_db_url(args.storage, store.uri)
    if args.status:
        print(engine.status(spec, store, db_url, scale=args.scale, overrides=_overrides(args.sets)))
        return 0
    if args.verify:
        from harness.studies import verify

        if workers > 1 or role is not None:
            raise UserError("--verify re-times runs one at a time (parallel runs would share the cores they are "
                            "timed on); run it without --workers.")
        verify.run_verify(spec, store, db_url, scale=args.scale, overrides=_overrides(args.sets), out_dir=out_dir,
                          show_progress=not args.no_progress, log=lambda line: print(line, flush=True))
        return 0
    outcome = engine.run_study(spec, store, db_url, scale=args.scale, overrides=_overrides(args.sets),
                               n_trials=args.n_trials, timeout=args.timeout, workers=workers, launcher=launcher,
                               role=role, show_progress=not args.no_progress, out_dir=out_dir,
                               log=lambda line: print(line, flush=True))
    print(f"{'worker ' + str(os.getpid()) if role else 'study ' + outcome.study_name}: {outcome.line()}", flush=True)
    return outcome.stop.exit_code if role else outcome.exit_code


def cmd_report(args) -> int:
    from harness.report import overview, tables
    from harness.report.reproduction import write_reproduction
    from harness.sweeps import spec as sweepspec

    out_dir = _out_dir(args.out, tables.REPORTS_DIR)
    if args.sweep is None:
        path, summary = write_reproduction(_store(args), out_dir)
        print(f"written: {path}\nsummary: {summary}")
        return 0
    spec = sweepspec.load(args.sweep)
    store = _store(args)
    reports = tables.build_all(store, spec, args.scale)
    written = overview.publish(store, spec, store.find_experiment(spec.name), reports, out_dir)
    print(reports[0].markdown)
    print("written: " + ", ".join(str(p) for paths in written for p in paths))
    return 0


def cmd_list(args) -> int:
    import experiments
    from harness.config import field_help
    from harness.data import DATASETS
    from harness.models import MODELS
    from harness.studies import spec as studyspec
    from harness.sweeps import spec as sweepspec

    print("experiments:")
    for name in experiments.names():
        print(f"  {name:<16} {experiments.get(name).title}")
    print("sweeps (harness sweep NAME --scale smoke|quick|full):")
    for name in sweepspec.available():
        print(f"  {name:<16} {sweepspec.load(name).title}")
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


def cmd_peak(args) -> int:
    import torch

    from harness import peak

    devices = [args.device] if args.device else \
        ["cpu", *(f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0))]
    for name in devices:
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"--device {name}: this machine has no usable CUDA GPU.")
        if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
            raise UserError(f"--device must be cpu, cuda or cuda:N (got {name}).")
        if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
            raise UserError(f"--device {name}: this machine has {torch.cuda.device_count()} GPU(s).")
    for name in devices:
        for dtype in args.dtype or ["fp32", "bf16", "fp16"]:
            try:
                print(peak.peak_flops(name, dtype, remeasure=args.remeasure).line(), flush=True)
            except RuntimeError as err:  # a dtype this device cannot multiply
                print(f"{name} {dtype}: cannot be measured here ({str(err).splitlines()[0]})", flush=True)
    print(f"cached in {peak.cache_path()}; MFU = achieved FLOP/s over these (harness/flops.py)")
    return 0


def cmd_dashboard(args) -> int:
    from harness.store import redact, resolve_db_url, resolve_tracking_uri
    from harness.store.uris import is_sqlite

    # Only the URI: the dashboard reads the study database, not the MLflow store.
    storage = resolve_db_url(args.storage, resolve_tracking_uri(args.tracking_uri))
    if is_sqlite(storage) and not Path(storage.removeprefix("sqlite:///")).exists():
        raise UserError(f"no study database at {redact(storage)} yet; run a study first "
                        "(make study-speed-recipe SCALE=smoke) or pass --storage.")
    script = Path(sys.executable).with_name("optuna-dashboard")
    if not script.exists():
        raise UserError("optuna-dashboard is not installed in this environment; run `make install`.")
    print(f"optuna-dashboard on http://127.0.0.1:{args.port} over {redact(storage)} (Ctrl-C stops it)", flush=True)
    os.execv(str(script), [str(script), storage, "--host", "127.0.0.1", "--port", str(args.port),
                           "--server", "wsgiref"])
    return 0


COMMANDS = {"run": cmd_run, "sweep": cmd_sweep, "study": cmd_study, "report": cmd_report, "list": cmd_list,
            "ui": cmd_ui, "peak": cmd_peak, "dashboard": cmd_dashboard}
