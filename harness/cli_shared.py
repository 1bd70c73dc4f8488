"""The `harness study` command and the several-worker form of `harness sweep` (kept out of cli.py,
which stays the single-process commands).

A launcher (`--workers K`, K > 1) prepares what must exist once (the study, its MLflow parent
run), starts K workers of the same command and summarizes from the stores when they are done. A
worker (`--workers 1` with a shared `--storage`, or started by a launcher) does the work.
"""

from __future__ import annotations

import json
import os
from typing import Any

from harness import sharedb
from harness.config import make_config
from harness.errors import UserError
from harness.tracking import INTERRUPTED, OK, Store, redact

EXIT_USAGE, EXIT_INCOMPLETE = 2, 1


def storage_url(args, store: Store) -> str:
    return args.storage or os.environ.get("HARNESS_STORAGE") or sharedb.default_url(store.uri)


def _set_args(overrides: dict[str, Any]) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]


# --- harness sweep NAME --workers K / --storage URL -----------------------------------------------
def sweep_shared(args, spec, store: Store, overrides: dict[str, Any]):
    from harness import workers
    from harness.claims import Claims, new_token
    from harness.sweep import SweepResult

    url = storage_url(args, store)
    sharedb.check_url(url)
    worker = workers.parse_worker(args.worker)
    if args.workers > 1 and worker is None:
        fixed = {k: v for k, v in {**spec.base, **spec.scales.get(args.scale, {}), **overrides}.items()
                 if not isinstance(v, list) and k not in spec.grid}
        threads = make_config({"experiment": spec.experiment, **fixed}).threads
        overrides = workers.thread_overrides(overrides, threads, args.workers)
        Claims(url).close()  # creates the claims table once, before the workers race to
        argv = ["sweep", str(spec.path), "--scale", args.scale, "--storage", url, "--tracking-uri", store.uri,
                *_set_args({k: (json.dumps(v) if isinstance(v, list) else v) for k, v in overrides.items()})]
        print(f"sweep {spec.name} ({args.scale}): {args.workers} workers, {overrides.get('threads', threads)} "
              f"thread(s) each, cells claimed in {redact(url)}", flush=True)
        import time
        started = time.perf_counter()
        codes = workers.launch(argv, args.workers, new_token(), None, overrides.get("threads", 1))
        if EXIT_USAGE in codes:
            return None
        results = workers.sweep_outcomes(store, spec, args.scale, overrides)
        return SweepResult(spec.name, args.scale, "(one per worker)", results, time.perf_counter() - started)
    claims = Claims(url, token=worker.token if worker else None)
    try:
        return workers.run_sweep_shared(spec, store, claims, scale=args.scale, overrides=overrides,
                                        show_progress=not args.no_progress)
    finally:
        claims.close()


# --- harness study NAME ---------------------------------------------------------------------------
def study(args, store: Store, overrides: dict[str, Any]) -> int:
    from harness import study as engine
    from harness import studyspec, study_report, workers
    from harness.claims import Claims, new_token

    spec = studyspec.load(args.study)
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {args.workers}).")
    if args.n_trials is not None and args.n_trials < 1:
        raise UserError(f"--n-trials must be at least 1 (got {args.n_trials}).")
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds (got {args.timeout}).")
    url = storage_url(args, store)
    worker = workers.parse_worker(args.worker)
    fixed = spec.fixed(args.scale, overrides)
    launcher = args.workers > 1 and worker is None
    if launcher:
        overrides = workers.thread_overrides(overrides, make_config(fixed).threads, args.workers)
        fixed = spec.fixed(args.scale, overrides)
    make_config(fixed)  # a bad fixed value stops the study before it is created
    name = spec.study_name(args.scale, overrides)

    if args.status:
        the_study = engine.open_study(spec, name, url, create=False)
        print(study_report.build(spec, the_study).text)
        return 0

    target = args.n_trials or spec.n_trials.get(args.scale, spec.n_trials.get("full", 20))
    shared = not sharedb.is_sqlite(url)
    salt = worker.index if worker else (os.getpid() if shared else 0)
    the_study = engine.open_study(spec, name, url, create=True, seed_salt=salt)
    experiment_id = store.experiment_id(spec.name)
    store.reap_stale_runs(experiment_id)
    parent = (worker.parent_run_id if worker and worker.parent_run_id else
              engine.parent_run(store, experiment_id, name, args.scale,
                                {"study": name, "study_file": spec.path, "scale": args.scale,
                                 "metrics": spec.metrics, "directions": spec.directions,
                                 "sampler": spec.sampler or {"name": "tpe"}, "pruner": spec.pruner or {"name": "none"},
                                 "overrides": overrides, "storage": redact(url)}))
    if worker is None:
        done = engine.counts(the_study)
        print(f"study {name}: target {target} finished trials, {done['complete'] + done['pruned']} already; "
              f"storage {redact(url)}; MLflow parent run {parent}", flush=True)

    code = 0
    import signal

    from harness.sweep import _raise_keyboard_interrupt

    previous_handler = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # SIGTERM closes runs like Ctrl-C
    try:
        if launcher:
            Claims(url).close()  # the claims table exists before the workers race to create it
            argv = ["study", str(spec.path), "--scale", args.scale, "--storage", url, "--tracking-uri", store.uri,
                    "--n-trials", str(target), *(["--timeout", str(args.timeout)] if args.timeout else []),
                    *_set_args(overrides)]
            codes = workers.launch(argv, args.workers, new_token(), parent,
                                   make_config(fixed).threads or 1)
            if EXIT_USAGE in codes:
                code = EXIT_USAGE
        else:
            claims = Claims(url, token=worker.token if worker else None)
            try:
                result = engine.work(spec, the_study, store, claims, scale=args.scale, fixed=fixed, target=target,
                                     timeout=args.timeout, parent_id=parent, show_progress=not args.no_progress)
            finally:
                claims.close()
            print(f"worker {os.getpid()}: ran {result.ran} trial(s) "
                  f"({', '.join(f'{n} {s}' for s, n in result.outcomes.items()) or 'none'}); "
                  f"stopped: {result.stopped_because}", flush=True)
            if result.stopped_because.startswith(f"{engine.MAX_FAILS_IN_A_ROW} trials in a row"):
                code = EXIT_INCOMPLETE
    except BaseException:
        if worker is None:
            store.end_run(parent, INTERRUPTED, "interrupted; run the same command again to resume")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    if worker is not None:
        return code
    report = study_report.build(spec, the_study)
    paths = study_report.write(spec, report, store, parent, args.out)
    store.end_run(parent, OK)
    print(report.text)
    print("written: " + ", ".join(str(p) for p in paths))
    finished = report.counts["complete"] + report.counts["pruned"]
    if code == 0 and finished < target and not args.timeout:
        code = EXIT_INCOMPLETE
    return code
