"""What each `harness` subcommand does, in a few lines each: parse the user's values, call the
engine, print, return the exit status."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from harness.cli.exits import EXIT_FAILED_CELLS
from harness.errors import StoreFault, UserError, first_line
from harness.signals import sigterm_as_interrupt


def _overrides(args, experiment: str) -> dict:
    """The --set values, after what --device stands for: device=D, and the backend the experiment
    declares for that kind of device where its config has one (gloo on a CPU, nccl on GPUs:
    Experiment.backends). A --set wins."""
    import experiments
    from harness.fields.config import parse_assignment

    values = {}
    if getattr(args, "device", None):
        values["device"] = args.device
        backend = experiments.get(experiment).backend_for(args.device)
        if backend is not None:
            values["backend"] = backend
    values.update(parse_assignment(s) for s in args.sets)
    return values


def where(args):
    """The tracking store and the shared database of this command (StoreLocations), resolved once
    from --tracking-uri, --storage, the environment and the defaults; every use below reads them."""
    if getattr(args, "where", None) is None:
        from harness.store import schemes
        from harness.store.uris import StoreLocations

        where = StoreLocations.resolve(args.tracking_uri, getattr(args, "storage", None))
        schemes.check_tracking_uri(where.tracking_uri)   # from the text alone: MLflow and Optuna are not loaded
        schemes.check_storage_url(where.db_url)
        args.where = where
    return args.where


def _store(args):
    from harness.store import Store
    from harness.store.uris import check_sqlite_path

    if hasattr(args, "storage"):  # the shared database's path too, before the store is made
        check_sqlite_path(where(args).db_url, "the shared database")
    return Store(where(args).tracking_uri)


def _out_dir(given: str | None, default: Path | None) -> Path:
    """The folder reports are written to, made and tried now: a file in the way, or a folder that
    cannot be made or written, is the user's to fix before anything is read or run."""
    from harness.store.probe import check_folder_writable

    folder = Path(given) if given else default
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file, not a folder; give a folder for the report files.")
    check_folder_writable(folder, "the report folder")
    return folder


def _scale(given: str, kind: str, spec) -> str:
    """--scale as given, or for `last` (make's default) the scale the sweep or study last ran at here."""
    from harness.cli import last_scale

    return last_scale.choose(kind, spec.name, spec.scales) if given == last_scale.LAST else given


def _workers(args) -> int:
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {args.workers}).")
    return args.workers


SLURM_OPTIONS = {"slurm_partition": "partition", "slurm_time": "time", "slurm_gpus_per_task": "gpus_per_task",
                 "slurm_cpus_per_task": "cpus_per_task"}


def _launcher(args):
    """The launcher the options ask for (None: this process, or local workers), checked before the
    engine creates or submits anything."""
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
    launcher.check(where(args).db_url, where(args).tracking_uri)
    return launcher


def cmd_run(args) -> int:
    import experiments
    from experiments import make_config

    overrides = _overrides(args, args.experiment)
    if any(isinstance(v, list) for v in overrides.values()):
        raise UserError("`harness run` takes single values; use `harness sweep` for lists.")
    experiments.check_reads(args.experiment, overrides)  # a field the experiment ignores would change nothing
    cfg = make_config({**overrides, "experiment": args.experiment})
    experiments.get(args.experiment).check_model(getattr(cfg, "model", None))
    _check_data_folders([cfg])
    from harness.cells import run_single   # every value is checked: now torch and the store
    from harness.store import Outcome

    with sigterm_as_interrupt():  # a `kill` closes the run as interrupted, as Ctrl-C does
        result = run_single(cfg, _store(args))
    if result.outcome != Outcome.OK:
        # A skip (no GPU here, backend missing) is the user's request not fitting this machine.
        raise UserError(f"{args.experiment} {result.outcome}: {result.reason}")
    for key, value in result.metrics.items():
        print(f"{key:>22}: {value:.6g}")
    print(f"logged as run {result.run_id}")
    return 0


def cmd_sweep(args) -> int:
    from harness.launchers import WorkerRole
    from harness.specs import sweep_spec

    spec = sweep_spec.load(args.sweep)
    args.scale = _scale(args.scale, "sweep", spec)
    if args.system_metrics is not None:
        spec.system_metrics = args.system_metrics
    workers, role, launcher = _workers(args), WorkerRole.decode(args.worker), _launcher(args)
    max_repeats = _max_repeats(args)
    job = _sweep_job(spec, args, role)
    store = _store(args)
    if role is None:
        from harness.cli import last_scale

        last_scale.record("sweep", spec.name, args.scale)
    # Every value is checked: only now the engine and the report, with torch, MLflow and the rest.
    from harness.cli.summary import sweep_summary
    from harness.report import overview
    from harness.store import Outcome
    from harness.sweeps.sweep_engine import run_job

    result = run_job(job, store, db_url=where(args).db_url, workers=workers, launcher=launcher, role=role,
                     show_progress=not args.no_progress, log=lambda line: print(line, flush=True),
                     remeasure_drifted=args.remeasure_drifted, remeasure_contended=args.remeasure_contended)
    if result.detached:
        print(f"sweep {spec.name} ({args.scale}): the workers run on; the same command again prints the "
              "summary once they are done (every cell reused)")
        return 0
    if role is None:
        print(sweep_summary(result, spec.report.get("metrics"), spec.report.get("notes", [])))
        if args.until_decided and not result.detached:
            _until_decided(job, store, args, max_repeats)   # the exit status stays the sweep's own
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


def _sweep_job(spec, args, role=None):
    """The sweep as one job (specs/sweep_job.py): the --set values read and the grid expanded, every
    cell validated, once for the whole command. The process that owns the sweep (no `role`; a
    launcher's worker was started by one that did this) first refuses more cells than --max-cells on
    their count alone, then says how large a large sweep is and checks the image folders its cells
    read (torch is not loaded yet: a mistake is answered at once)."""
    from harness.cli import emulated_dtype, job_size
    from harness.specs.sweep_job import SweepJob

    if role is not None:
        return SweepJob.build(spec, args.scale, _overrides(args, spec.experiment))
    job_size.check_cap("--max-cells", args.max_cells)
    overrides = _overrides(args, spec.experiment)
    job_size.check_sweep_count(spec, args.scale, overrides, args.max_cells)
    job = SweepJob.build(spec, args.scale, overrides)
    job_size.announce(job_size.sweep_size(job), args.max_cells)
    _check_data_folders(job.configs())
    emulated_dtype.warn_sweep(spec, args.scale, job.configs())   # after the checks: it may load torch
    return job


def _check_data_folders(configs) -> None:
    """The class folders an image-folder dataset needs, and a downloaded dataset's files or its
    address, for every cell that trains on one (each pair once)."""
    import experiments
    from harness.fields.data_folders import check_class_folders, check_downloadable

    wanted = {(cfg.dataset, cfg.data_dir) for cfg in configs if experiments.get(cfg.experiment).needs_dataset}
    for dataset, data_dir in sorted(wanted):
        check_class_folders(dataset, data_dir)
        check_downloadable(dataset, data_dir)


def _size_of_study(spec, args, overrides) -> None:
    """The same for a study's trials (--max-trials), before it is opened or any worker starts."""
    from harness.cli import job_size

    job_size.check_cap("--max-trials", args.max_trials)
    job_size.announce(job_size.study_size(spec, args.scale, overrides, args.n_trials), args.max_trials)


def _max_repeats(args) -> int | None:
    """--max-repeats, checked before anything runs."""
    if args.max_repeats is None:
        return None
    if not args.until_decided:
        raise UserError("--max-repeats needs --until-decided.")
    if args.max_repeats < 2:
        raise UserError(f"--max-repeats must be at least 2 (got {args.max_repeats}): one run decides no timing.")
    return args.max_repeats


def _until_decided(job, store, args, max_repeats):
    """The rounds --until-decided adds to the sweep's job; returns the last round's result (None when
    none ran)."""
    from harness.cli.summary import sweep_summary
    from harness.cli.decide import DEFAULT_MAX_REPEATS, run_until_decided

    rounds = run_until_decided(job, store, max_repeats=max_repeats or DEFAULT_MAX_REPEATS,
                               db_url=where(args).db_url, show_progress=not args.no_progress,
                               log=lambda line: print(line, flush=True))
    report = job.spec.report
    for extra in rounds:
        print(sweep_summary(extra, report.get("metrics"), report.get("notes", [])))
    return rounds[-1] if rounds else None


def cmd_study(args) -> int:
    from experiments import make_config
    from harness.launchers import WorkerRole
    from harness.specs import study_spec

    budget_s = _budget(args)
    spec = study_spec.load(args.study)
    args.scale = _scale(args.scale, "study", spec)
    overrides = _overrides(args, spec.experiment)
    workers, role = _workers(args), WorkerRole.decode(args.worker)
    if budget_s is not None:
        _check_budget(spec, args, budget_s, workers)
    for name, value, low in (("--n-trials", args.n_trials, 1), ("--timeout", args.timeout, 1e-9)):
        if value is not None and not (value >= low and math.isfinite(value)):
            raise UserError(f"{name} must be a positive finite number (got {value}).")
    if role is None and not (args.status or args.verify or args.calibrate_target):  # these run no trial of the study
        _size_of_study(spec, args, overrides)
    _check_one_at_a_time(spec, args, workers, role)
    if args.status:   # a read of the study's storage: no MLflow store is opened (or created)
        return _study_status(spec, args, overrides)
    if role is None:   # a worker runs its launcher's code: the launcher was asked
        from harness.cli.dirty_tree import refuse_dirty

        refuse_dirty(args.allow_dirty, "harness study")
    out_dir = _out_dir(args.out, None) if args.out else None
    launcher = _launcher(args)
    _check_data_folders([make_config(spec.fixed_for_checks(args.scale, overrides))])
    spec = _fit_to_host(spec, args, overrides, role)   # after the checks: it loads torch
    if role is None:   # the calibration and the race train too
        from harness.cli import emulated_dtype
        emulated_dtype.warn_study(spec, args.scale, spec.fixed(args.scale, overrides))
    store = _store(args)
    if role is None:
        from harness.cli import last_scale

        last_scale.record("study", spec.name, args.scale)
    db_url = where(args).db_url
    if args.calibrate_target:
        from harness.studies.deciding import calibrated_target

        calibrated_target.calibrate(spec, store, scale=args.scale, overrides=overrides,
                                    show_progress=not args.no_progress, log=lambda line: print(line, flush=True))
        return 0
    from harness.studies import study_engine   # every value is checked: now Optuna, MLflow and torch

    if args.verify:
        from harness.studies.deciding import verify

        verify.run_verify(spec, store, db_url, scale=args.scale, overrides=overrides, out_dir=out_dir,
                          show_progress=not args.no_progress, log=lambda line: print(line, flush=True))
        return 0
    outcome = study_engine.run_study(spec, store, db_url, scale=args.scale, overrides=overrides,
                               n_trials=args.n_trials, timeout=args.timeout, workers=workers, launcher=launcher,
                               role=role, show_progress=not args.no_progress, out_dir=out_dir,
                               log=lambda line: print(line, flush=True), budget_s=budget_s)
    print(f"{'worker ' + str(os.getpid()) if role else 'study ' + outcome.study_name}: {outcome.line()}", flush=True)
    if outcome.budgeted and not role and outcome.stop.exit_code == 0:   # the race, on what the budget has left
        from harness.studies.deciding import verify

        verify.run_verify(spec, store, db_url, scale=args.scale, overrides=overrides, out_dir=out_dir,
                          show_progress=not args.no_progress, log=lambda line: print(line, flush=True), budgeted=True)
        study_engine.finish_budget(spec, db_url, scale=args.scale, overrides=overrides,
                                   log=lambda line: print(line, flush=True))
    return outcome.stop.exit_code if role else outcome.exit_code


def _check_one_at_a_time(spec, args, workers: int, role) -> None:
    """--calibrate-target and --verify time runs one after another, at a scale the file calibrates:
    said before anything is loaded."""
    if args.calibrate_target:
        from harness.studies.deciding import calibrated_target

        calibrated_target.check_calibrates(spec, args.scale)
        if workers > 1 or role is not None:
            raise UserError("--calibrate-target times runs one at a time; run it without --workers.")
    if args.verify and (workers > 1 or role is not None):
        raise UserError("--verify re-times runs one at a time (parallel runs would share the cores they are "
                        "timed on); run it without --workers.")


def _budget(args) -> float | None:
    """--budget in seconds, or one sentence, before anything is loaded."""
    if args.budget is None:
        return None
    from harness.studies import budget

    if args.status or args.verify or args.calibrate_target:
        raise UserError("--budget is for running a study (its search and race); leave it out with "
                        "--status, --verify and --calibrate-target.")
    return budget.parse(args.budget)


def _check_budget(spec, args, seconds: float, workers: int) -> None:
    """A budget that cannot hold one run of the tuned loop, or the race alone, is refused before any
    trial (sized from the calibration's figures where the target is calibrated; otherwise the baseline
    trial sizes the race once it has run)."""
    from harness.studies import budget, trial_target

    if workers > 1 or args.worker:
        raise UserError("--budget times one study on the cores it holds; run it without --workers.")
    found = trial_target.read(spec, args.scale)
    reference = (found or {}).get("reference_time_to_target_s")
    if reference is None:
        return
    need = budget.race_need(spec.verify, reference_s=reference, incumbent_s=None, overhead_s=budget.FIRST_OVERHEAD_S,
                            methods=1,
                            neighbour_runs=budget.neighbour_runs(spec.verify, "lr_factor" in spec.space))
    budget.check_affords(seconds, reference_s=reference, need=need, overhead=budget.FIRST_OVERHEAD_S)


def _fit_to_host(spec, args, overrides: dict, role):
    """The study's space without the dtypes this CPU emulates (unless --keep-emulated), each one left
    out said in a line by the process that owns the study (studies/host_space.py)."""
    from harness.studies import host_space

    fitted = host_space.fit(spec, args.scale, overrides, keep_emulated=args.keep_emulated)
    if role is None:
        for line in host_space.lines(fitted):
            print(f"study {spec.name} ({args.scale}): {line}", flush=True)
    return fitted


def _study_status(spec, args, overrides: dict) -> int:
    """--status: the study read from its storage alone."""
    from harness.store.uris import check_sqlite_path
    from harness.studies import study_status

    db_url = where(args).db_url
    check_sqlite_path(db_url, "the shared database")
    print(study_status.status(spec, db_url, scale=args.scale, overrides=overrides))
    return 0


def cmd_report(args) -> int:
    from harness.folders import REPORTS_DIR
    from harness.specs import sweep_spec

    if args.sweep is not None and args.sweeps:
        raise UserError("harness report takes a sweep or --sweeps, not both: --sweeps writes REPRODUCTION.md over "
                        "those sweeps, a sweep its own table.")
    from harness.cli import last_scale

    spec = sweep_spec.load(args.sweep) if args.sweep is not None else None
    if spec is not None and args.scale == last_scale.LAST:   # else: the latest run's scale in the store
        args.scale = last_scale.choose("sweep", spec.name, spec.scales, fallback=None)
    for name in args.sweeps or []:
        sweep_spec.load(name)   # a misspelt name is one sentence before the store is read
    out_dir = _out_dir(args.out, REPORTS_DIR)
    _existing_store(args)
    # Every value is checked: only now the report's tables and plots (pandas, matplotlib, MLflow).
    from harness.report import overview, tables
    from harness.report.reproduction import write_reproduction

    if spec is None:
        store = _store(args)
        path, summary = write_reproduction(store, out_dir, args.sweeps)
        print(f"written: {path}\nsummary: {summary}")
        if args.out:   # a report written for a results folder: its store is committed beside it
            from harness.cli.reproduce import settle_committed_store

            settle_committed_store(store)
        return 0
    store = _store(args)
    reports = tables.build_all(store, spec, args.scale)
    written = overview.publish(store, spec, store.find_experiment(spec.name), reports, out_dir, scale_in_name=True)
    print(reports[0].markdown)
    print("written: " + ", ".join(str(p) for paths in written for p in paths))
    return 0


def _existing_store(args) -> None:
    """A report reads a store and never creates one: a SQLite path with no file is a mistyped
    --tracking-uri (or no sweep yet), said before anything is made."""
    from harness.store.uris import check_sqlite_path, sqlite_path

    uri = where(args).tracking_uri
    check_sqlite_path(uri, "the tracking store")
    path = sqlite_path(uri)
    if path is None or path.is_file():
        return
    if args.sweep is not None:
        from harness.specs import sweep_spec

        name = sweep_spec.load(args.sweep).name
        raise UserError(f"sweep '{name}' has not been run: there is no tracking store at {path} (`harness report` "
                        f"creates none); check --tracking-uri, or run `make sweep-{name} SCALE=smoke` first.")
    raise UserError(f"there is no tracking store at {path}; `harness report` reads one and creates none: check "
                    "--tracking-uri, or run a sweep first.")


def cmd_list(args) -> int:
    from harness.cli import listing

    print("\n".join(listing.render(args.group)))
    return 0


def cmd_ui(args) -> int:
    from harness.cli import ports
    from harness.cli.ui_server import serve

    ports.check_port(args.port, "ui")  # before the store is opened: a port in use is told at once
    code = serve(_store(args), args.port)  # the store is validated (and a new SQLite file made) first
    # Leave at once: the interpreter's own teardown of MLflow's imports took tens of seconds on a
    # loaded machine after the server had stopped (the old exec of `mlflow ui` had none).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_peak(args) -> int:
    from harness.machine import device_names, hardware

    cores = hardware.usable_core_count()
    thread_counts = sorted({1, cores}) if args.threads is None else [args.threads]
    if any(t < 1 or t > cores for t in thread_counts):
        raise UserError(f"--threads must be between 1 and {cores}, the cores this process may use.")
    if args.device:
        try:
            device_names.parse_device(args.device)
        except ValueError:
            raise UserError(f"--device must be {device_names.DEVICE_FORMS} (got {args.device}).") from None
    # Which GPUs are here is torch's to say: imported from here on.
    devices = [args.device] if args.device else ["cpu", *(f"cuda:{i}" for i in range(hardware.gpu_count()))]
    for name in devices:
        missing = hardware.missing_gpu(name)
        if missing:
            raise UserError(f"--device {name}: {missing}.")
    from harness.training import peak
    for name in devices:
        for dtype in args.dtype or ["fp32", "bf16", "fp16"]:
            for threads in (thread_counts if name == "cpu" else [0]):
                try:
                    print(peak.peak_flops(name, dtype, threads=threads, remeasure=args.remeasure).line(), flush=True)
                except ValueError as err:  # no arithmetic of its own in this dtype: MFU is N/A
                    print(f"{name} {dtype}: MFU N/A ({err})", flush=True)
                    break
                except RuntimeError as err:  # a dtype this device cannot multiply
                    print(f"{name} {dtype}: cannot be measured here ({str(err).splitlines()[0]})", flush=True)
                    break
    print(f"cached in {peak.cache_path()}; MFU = achieved FLOP/s over the peak of the cores or devices a run "
          "used (harness/training/flops.py)")
    return 0


def cmd_machine(args) -> int:
    from harness.cli import machine_info

    for line in machine_info.lines():
        print(line, flush=True)
    return 0


def cmd_dashboard(args) -> int:
    from harness.cli import ports
    from harness.store import redact
    from harness.store.uris import is_sqlite

    ports.check_port(args.port, "dashboard")
    # Only the URI: the dashboard reads the study database, not the MLflow store.
    storage = where(args).db_url
    if is_sqlite(storage) and not Path(storage.removeprefix("sqlite:///")).exists():
        raise UserError(f"no study database at {redact(storage)} yet; run a study first "
                        "(make study-speed-recipe SCALE=smoke) or pass --storage.")
    script = Path(sys.executable).with_name("optuna-dashboard")
    if not script.exists():
        raise UserError("optuna-dashboard is not installed in this environment; run `make install`.")
    _make_study_tables(storage)
    print(f"optuna-dashboard on http://127.0.0.1:{args.port} over {redact(storage)} (Ctrl-C stops it)", flush=True)
    # optuna-dashboard's command takes the storage URL only as an argument, which `ps` shows every user;
    # its own main() runs here with that argument read from the environment (sys.argv set inside Python
    # is not the process's command line).
    serve = ("import os, sys; from optuna_dashboard._cli import main; "
             "sys.argv = ['optuna-dashboard', os.environ['HARNESS_STORAGE'], *sys.argv[1:]]; main()")
    os.execve(sys.executable, [sys.executable, "-c", serve, "--host", "127.0.0.1", "--port", str(args.port),
                               "--server", "wsgiref"], {**os.environ, "HARNESS_STORAGE": storage})
    return 0


def _make_study_tables(storage: str) -> None:
    """optuna-dashboard opens the storage without creating Optuna's tables, and a database that holds
    only the sweeps' claims (any sweep makes it) has none, which crashed it: opened here, they are
    made, and the dashboard shows an empty study list. A storage that cannot be opened is one sentence."""
    from harness.studies import study_storage

    study_storage.storage(storage).engine.dispose()


def cmd_reproduce(args) -> int:
    from harness.cli import reproduce
    from harness.folders import REPORTS_DIR

    if not args.data_dir:
        raise UserError("harness reproduce needs --data-dir, the folder holding CIFAR-10 as train/ and test/ "
                        "class folders of images (for example --data-dir ../shared/data/cifar10-jpeg).")
    planned = reproduce.plan(args.scale, args.data_dir, args.sweeps)
    _check_planned_data(planned, args.scale)
    from harness.cli.dirty_tree import refuse_dirty

    refuse_dirty(args.allow_dirty, "harness reproduce")
    out_dir = _out_dir(args.out, REPORTS_DIR)
    store = _store(args)   # a bad URI is one sentence now, not one per sweep
    return reproduce.reproduce(planned, args.scale, store, out_dir, args.sweeps)


def _check_planned_data(planned, scale: str) -> None:
    """The data folder every planned sweep's cells would read, checked before any sweep starts."""
    from harness.specs.sweep_spec import expand, load

    for item in planned:
        if item.data_dir is not None:
            cells = expand(load(item.sweep), scale, {"data_dir": item.data_dir})
            _check_data_folders([c.config for c in cells if c.config is not None])


# The commands that open a store: their locations are checked, from the text alone, before anything else.
STORE_COMMANDS = ("run", "sweep", "study", "report", "ui", "dashboard", "reproduce")

COMMANDS = {"run": cmd_run, "sweep": cmd_sweep, "study": cmd_study, "report": cmd_report, "list": cmd_list,
            "ui": cmd_ui, "peak": cmd_peak, "machine": cmd_machine, "dashboard": cmd_dashboard, "reproduce": cmd_reproduce}
