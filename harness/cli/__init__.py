"""`harness` command line: run one experiment, run a sweep or a study, report a sweep, reproduce every table at a
scale, list what exists, describe this machine, open the UI or the study dashboard, show the measured peak.

Every user mistake ends as one sentence on stderr and exit status 2; a sweep in which some cells
failed at run time exits 1 after recording them, and so does a fault of the machine or the store
(disk full, a file made read-only) after closing what the store still takes; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import threading
import warnings
from typing import Sequence

from harness.cli.exits import EXIT_FAULT, EXIT_INTERRUPTED, EXIT_USAGE
from harness.errors import StoreFault, UserError, first_line
from harness.signals import cut_off


class _Formatter(argparse.HelpFormatter):
    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse's own wrap cuts at hyphens too: a scale named cpu-fp32 was shown as "cpu-" and "fp32"
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line instead of argparse's usage block
        raise UserError(f"{message} (see `{self.prog} --help`).")


def _summary() -> str:
    """The docstring's first paragraph as one line: `harness --help` shows it whole (its first line
    alone stopped mid-sentence)."""
    return " ".join(__doc__.split("\n\n")[0].split())


def check_command(argv: Sequence[str], commands: Sequence[str]) -> None:
    """A mistyped command is one sentence with the closest command, as a mistyped sweep name is."""
    from harness.suggest import did_you_mean

    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in commands or any(a in ("-h", "--help") for a in argv[:argv.index(word)]):
        return
    raise UserError(f"unknown command '{word}'; {did_you_mean(word, commands)}choose one of "
                    f"{', '.join(commands)} (see `harness --help`).")


SCALE_HELP = ("smoke | quick | full (the document's scale, the default), or a scale the file adds: cpu (what a small "
              "CPU can run), airbench's cpu-goal, cpu-ladder and cpu-fp32; last: the scale it last ran at in this "
              "checkout, else smoke (make's default)")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, "
                                               "else sqlite:///mlruns/mlflow.db in the project)")
    sets = argparse.ArgumentParser(add_help=False)
    sets.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config field (repeatable); in a sweep, KEY=[a,b] makes it an axis")
    sets.add_argument("--device", help="cpu, cuda or cuda:N for every cell, with the backend its experiment declares "
                      "for that device where it has one (gloo on cpu: a GPU sweep as CPU processes; nccl on cuda); "
                      "a --set wins")

    parser = _Parser(prog="harness", description=_summary())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", parents=[common, sets], help="run one experiment once and log it")
    p.add_argument("experiment")
    _add_sweep(sub, [common, sets])
    _add_study(sub, [common, sets])
    _add_reading(sub, [common])
    return parser


def _add_sweep(sub, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sweep", parents=parents, help="run a sweep (grid) and log every cell")
    p.add_argument("sweep", help="sweep name (see `harness list`) or path of a sweep .toml file")
    p.add_argument("--scale", default="full", help=SCALE_HELP)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--max-cells", type=int, default=10_000,
                   help="refuse a sweep of more cells than this (default 10000)")
    p.add_argument("--remeasure-drifted", action="store_true",
                   help="run again the finished cells measured at a speed_index more than 44%% from today's "
                        "(the calibration's own noise; neither taken under load)")
    p.add_argument("--remeasure-contended", action="store_true",
                   help="run again the finished cells timed while other work held the cores (their rows are "
                        "marked contended, not judged: no check rests on them)")
    p.add_argument("--until-decided", action="store_true",
                   help="then add rounds, in this process, for the grid points of INCONCLUSIVE timing checks only")
    p.add_argument("--max-repeats", type=int, default=None,
                   help="with --until-decided: stop when those points have this many repeats (default 10)")
    p.add_argument("--system-metrics", action=argparse.BooleanOptionalAction, default=None,
                   help="MLflow's system metrics (CPU, memory, GPU use, sampled every 2 s) in every cell "
                        "(default: the sweep file's system_metrics, else on where a CUDA GPU is present)")
    _add_worker_args(p)


def _add_study(sub, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("study", parents=parents, help="run (or resume) an Optuna study and log every trial")
    p.add_argument("study", help="study name (see `harness list`) or path of a study_*.toml file")
    p.add_argument("--scale", default="full", help=SCALE_HELP)
    p.add_argument("--n-trials", type=int, help="finished trials the study should reach (default: the file's, per scale)")
    p.add_argument("--timeout", type=float, help="start no new trial after this many seconds")
    p.add_argument("--max-trials", type=int, default=10_000,
                   help="refuse a study whose target (--n-trials, else the file's) is more trials than this, "
                        "counted for the study as a whole however many --workers or Slurm jobs share them "
                        "(default 10000); --status, --verify and --calibrate-target run none and are not capped")
    p.add_argument("--budget", help="one wall-clock budget for the search and the race together (2h, 90m, 1h30m, 5400s): "
                   "no trial starts once the time left is what the race needs, then the race runs on what is left; "
                   "kept in the study's storage, so a resumed study spends only what is left")
    p.add_argument("--status", action="store_true", help="show trials done, running, failed, pruned and the best so far")
    p.add_argument("--verify", action="store_true", help="race the front's best trials over seeds in fresh processes against "
                   "the tuned baseline, name the winner on the re-measured intervals, ablate it ([verify]); resumable")
    p.add_argument("--calibrate-target", action="store_true", help="measure the study's target at --scale from its "
                   "tuned baseline ([target] in the study file) and write results/targets/<study>-<scale>.json; resumable")
    p.add_argument("--out", help="folder for the study's .md, .csv and .png (default: reports/)")
    p.add_argument("--keep-emulated", action="store_true", help="keep in the space the dtypes this CPU emulates "
                   "through fp32 (left out by default: many times slower, they cannot win here)")
    p.add_argument("--allow-dirty", action="store_true", help="start although the working tree has uncommitted "
                   "changes (refused by default: the runs would record a commit whose code they did not run)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_worker_args(p)


def _add_reading(sub, parents: list[argparse.ArgumentParser]) -> None:
    """The commands that run no sweep or study of their own (reproduce runs each as `harness sweep`)."""
    common = parents[0]
    p = sub.add_parser("report", parents=[common], help="table and plot of a sweep beside the published "
                       "figures; without a sweep, reports/REPRODUCTION.md over every sweep")
    p.add_argument("sweep", nargs="?")
    p.add_argument("--scale", help="which scale's cells to report (default: the latest run's in the store; last: "
                   "the scale the sweep last ran at in this checkout); written as reports/<sweep>-<scale>.*")
    p.add_argument("--out", help="folder for the .md, .csv and .png (default: reports/)")
    p.add_argument("--sweeps", type=_names, help="without a sweep: REPRODUCTION.md over these sweeps alone "
                   "(comma-separated), for a results folder that holds some of the tables")

    p = sub.add_parser("reproduce", parents=[common], help="every sweep that has the scale, in the documents' "
                       "order, then REPRODUCTION.md (resumable: finished cells are reused)")
    p.add_argument("--scale", default="cpu", help="the sweeps' scale to run (default cpu: every sweep with a "
                   "[scales.cpu])")
    p.add_argument("--data-dir", help="CIFAR-10 as train/ and test/ class folders, for the sweeps that train on data")
    p.add_argument("--out", help="folder for REPRODUCTION.md and its tables (default: reports/)")
    p.add_argument("--sweeps", type=_names, help="run and report these sweeps alone (comma-separated; default: "
                   "every sweep with the scale)")
    p.add_argument("--allow-dirty", action="store_true", help="start although the working tree has uncommitted "
                   "changes (refused by default: the cells would record a commit whose code they did not run)")

    p = sub.add_parser("list", parents=[common], help="experiments, sweeps, studies, models, datasets and config "
                       "fields, grouped; a group whole: harness list sweeps (experiments, studies, models, datasets, "
                       "fields)")
    p.add_argument("group", nargs="?", help="one group, each description whole")

    p = sub.add_parser("ui", parents=[common], help="serve the MLflow UI on 127.0.0.1 over the store")
    p.add_argument("--port", type=int, default=5000)

    sub.add_parser("machine", help="this machine in a few lines: CPU, usable cores, the dtypes it computes natively "
                   "and those torch emulates, GPUs, cached peaks, fingerprint and speed index")

    p = sub.add_parser("peak", help="the peak each run's MFU is measured against: the best steady rate of "
                       "matmul and convolution kernels, with the kernel and size behind it (measured here, cached "
                       "per machine)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: the CPU and every GPU present)")
    p.add_argument("--dtype", action="append", choices=["fp32", "bf16", "fp16"],
                   help="repeatable (default: all three)")
    p.add_argument("--threads", type=int, help="CPU threads (default: 1 and every core this process may use)")
    p.add_argument("--remeasure", action="store_true", help="measure again even if a figure is cached")

    p = sub.add_parser("dashboard", parents=[common], help="serve optuna-dashboard on 127.0.0.1 over the "
                       "study storage, to watch studies live")
    p.add_argument("--storage", help="study database (default: optuna.db beside the MLflow store)")
    p.add_argument("--port", type=int, default=8080)


def _names(text: str) -> list[str]:
    """--sweeps a,b,c: the names, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no sweep; give them comma-separated, as in --sweeps resnet,resnet-lr")
    return names


def _add_worker_args(p) -> None:
    p.add_argument("--workers", type=int, default=1, help="worker processes on this machine (default 1)")
    p.add_argument("--storage", help="database the workers share (claims, studies): sqlite:///file.db (one "
                                     "machine; default optuna.db beside the MLflow store) or postgresql://user:pw@host/db")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # INDEX:TOKEN:PARENT[:close], from the launcher
    p.add_argument("--launcher", choices=("local", "slurm"), default="local",
                   help="where the workers run: local processes, or one Slurm job array (needs a PostgreSQL "
                        "--storage and an http:// --tracking-uri every node reaches)")
    p.add_argument("--slurm-partition", help="Slurm partition (default: the cluster's default)")
    p.add_argument("--slurm-time", help="time limit of each worker job: minutes or [D-]HH:MM[:SS] (default 60)")
    p.add_argument("--slurm-gpus-per-task", type=int, help="GPUs for each worker job (default 0)")
    p.add_argument("--slurm-cpus-per-task", type=int, help="cores for each worker job, its torch threads (default 1)")
    p.add_argument("--detach", action="store_true", help="with --launcher slurm: submit, print the job ids and return")


def main(argv: Sequence[str] | None = None) -> int:
    from harness.cli.commands import COMMANDS, STORE_COMMANDS, where

    args = None
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        check_command(argv, list(COMMANDS))
        args = _parser().parse_args(argv)
        if args.command in STORE_COMMANDS:
            where(args)
        return COMMANDS[args.command](args)
    except UserError as err:
        _say(str(err))
        return EXIT_USAGE
    except StoreFault as err:  # the engine closed what the store still took and said what is kept
        _say(str(err))
        return EXIT_FAULT
    except (OSError, MemoryError) as err:  # a full disk, a vanished folder: the machine, not a bug
        _say(_fault_sentence(err))
        return EXIT_FAULT
    except KeyboardInterrupt as stop:
        print(f"harness: {interrupted_line(getattr(args, 'command', None), cut_off(stop))}", file=sys.stderr)
        return EXIT_INTERRUPTED


# What Ctrl-C or SIGTERM left, in each command's words.
INTERRUPTED = {
    "sweep": "interrupted; finished cells are kept, the same command resumes the sweep.",
    "reproduce": "interrupted; finished cells are kept, the same command resumes the reproduction.",
    "study": "interrupted; finished trials are kept, the same command resumes the study.",
    "run": "interrupted; the run is closed as interrupted (KILLED in MLflow) and measured nothing; "
           "run the same command again.",
}


def interrupted_line(command: str | None, cut: list[str]) -> str:
    """The line Ctrl-C ends a command with. A sweep names the cell it cut short, which reruns, only
    when it cut one (not when it stopped between cells, or before the first)."""
    if command == "sweep" and cut:
        return f"interrupted; finished cells are kept, the interrupted one ({cut[0]}) reruns next time."
    return INTERRUPTED.get(command, "interrupted.")


def _say(sentence: str) -> None:
    """The one error line; a URL quoted in it (a driver's words, a location) never shows its password."""
    from harness.store.uris import hide_passwords

    print(f"harness: error: {hide_passwords(sentence)}", file=sys.stderr)


def _fault_sentence(err: BaseException) -> str:
    if isinstance(err, MemoryError):
        return "out of memory outside any cell; free memory or shrink the run (batch_size, train_limit)."
    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    return f"the system refused an operation: {err.strerror or first_line(err)}{where}."


def entry() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        code = main()
        if code == EXIT_INTERRUPTED:
            _exit_now(code)
        if code == EXIT_USAGE and not _threads_to_wait_for():
            # A mistake is answered once its sentence is out: tearing down the interpreter after the
            # heavy imports (torch, MLflow, pandas) kept a refused command alive for seconds more on a
            # busy machine.
            _exit_now(code)
        sys.exit(code)
    except BrokenPipeError:  # `harness list | head`: the reader has gone, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def _threads_to_wait_for() -> list[threading.Thread]:
    """Threads the interpreter's teardown would wait for (not daemons): work a fast exit would cut."""
    return [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]


def _exit_now(code: int) -> None:
    """Exit with `code` for certain and at once. After a handled Ctrl-C or SIGTERM (130): CPython
    remembers a KeyboardInterrupt that passed through a C-level evaluation (PyRun_String, which some extensions call) even when
    Python code caught it later, and then ends the process by SIGINT instead of the status it was
    given (Modules/main.c, Py_RunMain); which way it went depended on where the signal landed.
    The exit handlers still run and the streams are flushed; only the interpreter's teardown is skipped."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
