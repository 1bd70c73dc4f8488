"""What a study has found, read back from its storage: trial counts by state, the best trial (one
objective) or the Pareto front (several), as a table and a plot written under reports/ and logged
with the study's parent run in MLflow. A study with a baseline trial shows it first, each other
row's speed-up over it (its first objective, when that is a time to minimize), and the [report]
metrics (MFU) beside the objectives; a target a trial never reached reads "not reached". A warm
start's name is shown beside its trial, and what the host's fit left out of the space under the counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import math

import pandas as pd

from harness import ui_links
from harness.folders import REPORTS_DIR
from harness.store.paths import inside
from harness.studies import baseline as study_baseline
from harness.specs.study_spec import StudySpec
from harness.studies import budget, host_space, incumbent, trial_status, warm_starts
from harness.studies.trial_status import TrialStatus
from harness.studies.trial_tags import CONTENDED, METRICS_ATTR, RUN_ATTR, WARM_START_ATTR
from harness.machine.machine_load import CONTENDED_CORES


@dataclass
class StudyReport:
    study_name: str
    counts: dict[TrialStatus, int]
    front: pd.DataFrame           # best trial (one row) or the Pareto front, best first (the baseline first, if any)
    trials: pd.DataFrame          # every complete trial, for the plot
    text: str = ""
    baseline: pd.DataFrame | None = None   # the baseline trial's row, when the study has one and it is complete
    target: float | None = None            # the target accuracy the baseline set for the others
    all_trials: pd.DataFrame | None = None  # every trial whatever its state, with the state and the start state
    requeues: list = field(default_factory=list)  # (interrupted trial, its requeued trial or None, that one's status)
    budget_line: str | None = None         # a budgeted study's budget, spent, left and phase
    pruned: list = field(default_factory=list)    # (trial, why it was stopped) for each trial stopped short
    notes: list[str] = field(default_factory=list)  # the space on the study's host, warm starts left out


def build(spec: StudySpec, study) -> StudyReport:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    counts = trial_status.count(trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete:
        best = study.best_trials if spec.multi_objective else [study.best_trial]
    else:
        best = []
    base = study_baseline.finished(study) if spec.baseline is not None else None
    front = _frame(spec, best)
    if len(front):
        front = front.sort_values(spec.metrics[0], ascending=spec.directions[0] == "minimize")
    report = StudyReport(study.study_name, counts, front.reset_index(drop=True), _frame(spec, complete))
    if base is not None:
        report.baseline = _frame(spec, [base])
        others = report.front[report.front["trial"] != base.number]
        report.front = pd.concat([report.baseline, others], ignore_index=True)
        if _speeds_up(spec):
            first = spec.metrics[0]
            reference = report.baseline[first].iloc[0]
            # a baseline that never reached the target has no time to divide: no speed-up is formed
            # (not "not reached" for a trial that did reach it, as infinity over its time would print)
            speedup = reference / report.front[first] if math.isfinite(reference) else math.nan
            report.front.insert(report.front.columns.get_loc(first) + 1, "speedup", speedup)
        report.target = study.user_attrs.get(study_baseline.TARGET_ATTR)
    report.requeues = trial_status.requeues(trials)
    report.budget_line = budget.status_line(study.user_attrs)
    report.pruned = [(t.number, t.user_attrs[incumbent.PRUNED_ATTR]["reason"]) for t in trials
                     if t.state == TrialState.PRUNED and incumbent.PRUNED_ATTR in t.user_attrs]
    report.all_trials = _all_trials(spec, trials, {int(t) for t in report.front["trial"]} if len(report.front) else set())
    _name_warm_starts(report, trials)
    report.notes = host_space.report_lines(study) + warm_starts.report_lines(study)
    report.text = to_text(spec, report)
    return report


def _all_trials(spec: StudySpec, trials, front: set[int]) -> pd.DataFrame:
    """Every trial: its parameters, state, objectives (empty unless complete), whether it is on the front."""
    frame = _frame(spec, trials)
    status = trial_status.statuses(trials)
    frame.insert(1, "state", [str(status[t.number]) for t in trials])
    frame.insert(2, "on_front", [t.number in front for t in trials])
    frame.insert(3, "baseline", [bool(t.user_attrs.get(study_baseline.BASELINE_ATTR)) for t in trials])
    return frame


def _name_warm_starts(report: StudyReport, trials) -> None:
    """A column beside the trial number naming each warm start, in a study that has them."""
    names = {t.number: t.user_attrs[WARM_START_ATTR] for t in trials if WARM_START_ATTR in t.user_attrs}
    if names:
        for frame in (report.front, report.all_trials):
            frame.insert(1, "warm_start", [names.get(int(n), "") for n in frame["trial"]])


def _speeds_up(spec: StudySpec) -> bool:
    """A speed-up over the baseline means something when the first objective is seconds to minimize."""
    return spec.directions[0] == "minimize" and spec.metrics[0].endswith("_s")


def _frame(spec: StudySpec, trials) -> pd.DataFrame:
    from optuna.trial import TrialState

    extra = spec.report_metrics
    rows = []
    for t in trials:
        row = {"trial": t.number, **{k: t.params.get(k) for k in spec.space}}
        # a pruned trial's value is the last intermediate one Optuna was told (an accuracy), not an objective
        row.update(dict(zip(spec.metrics, (t.values or []) if t.state == TrialState.COMPLETE else [])))
        row.update({m: t.user_attrs.get(METRICS_ATTR, {}).get(m) for m in extra})
        row[CONTENDED] = t.user_attrs.get(METRICS_ATTR, {}).get(CONTENDED)   # None: not known (an older trial)
        row["mlflow_run_id"] = t.user_attrs.get(RUN_ATTR, "")
        rows.append(row)
    return pd.DataFrame(rows, columns=["trial", *spec.space, *spec.metrics, *extra, CONTENDED, "mlflow_run_id"])


def contended_line(frame: pd.DataFrame) -> list[str]:
    """One line naming the trials timed while other work held the machine's cores: their times are
    likely slow, so a front or a winner read from them is suspect (the race measures again)."""
    marked = frame[frame[CONTENDED] == 1]["trial"].tolist()   # every frame has the column (_frame)
    if not marked:
        return []
    return [f"contended: trial{'s' * (len(marked) > 1)} {', '.join(map(str, marked))} ran while other work held "
            f"at least {CONTENDED_CORES} of the machine's cores (harness/machine/machine_load.py), so "
            f"{'their times are' if len(marked) > 1 else 'its time is'} likely slow: run the study on an otherwise "
            "idle machine, or trust only the race's re-measured figures"]


def to_text(spec: StudySpec, report: StudyReport) -> str:
    c = report.counts
    lines = [f"study {report.study_name}: {c['complete']} complete, {c['pruned']} pruned, {c['fail']} failed, "
             + (f"{c['interrupted']} interrupted, " if c["interrupted"] else "")
             + f"{c['running']} running, {c['waiting']} waiting" + (f", {c['requeued']} requeued" if c["requeued"] else ""),
             *requeue_lines(report.requeues), *report.notes, *([report.budget_line] if report.budget_line else []),
             *pruned_lines(spec, report.pruned)]
    if not len(report.front):
        lines.append("no complete trial yet")
        return "\n".join(lines)
    heading = "Pareto front" if spec.multi_objective else "best so far"
    goal = ", ".join(f"{d} {m}" for m, d in zip(spec.metrics, spec.directions))
    if report.baseline is not None:
        lines.append(_baseline_line(spec, report))
        lines.append(f"{heading} ({goal}), after the baseline (first row):")
    else:
        lines.append(f"{heading} ({goal}):")
    front = report.front.drop(columns=["mlflow_run_id"])
    if not (front[CONTENDED] == 1).any():
        front = front.drop(columns=[CONTENDED])   # a column of "no" tells nothing: shown when a trial was
    lines.append(markdown(front))
    lines += contended_line(report.all_trials if report.all_trials is not None else report.front)
    if "mfu" in report.front:
        lines.append("mfu: training FLOP/s (counted per step) over this machine's measured peak of the cores the "
                     "trial used, in its dtype (`harness peak` names the kernel behind it)")
    if report.baseline is not None and "speedup" in report.front and len(report.front) > 1:
        first = spec.metrics[0]
        best = report.front.iloc[1:].sort_values(first, ascending=True).iloc[0]
        reference = report.baseline[first].iloc[0]
        if math.isfinite(reference):
            speed = f"{best['speedup']:.3g}x the baseline's speed to the target ({_fmt(best[first])} vs {_fmt(reference)} s)"
        else:
            speed = (f"{_fmt(best[first])} s to the target, which the baseline did not reach within its budget, "
                     "so no speed-up over it is formed")
        lines.append(f"fastest on the front: trial {best['trial']}, {speed}"
                     + "".join(f"; {m} {_fmt(best[m])} vs {_fmt(report.baseline[m].iloc[0])}"
                               for m in spec.report_metrics if m in best))
    return "\n".join(lines)


SHOWN_PRUNED = 5


def pruned_lines(spec: StudySpec, pruned: list) -> list[str]:
    """The trials stopped short of the target, and why (the first few; the CSV has each one's state)."""
    if not pruned:
        return []
    lines = [f"pruned (stopped short of the target: past {spec.prune_after:g}x the fastest time to it so far, or "
             "the cap, or the end of their epochs; counted apart from failed):"]
    lines += [f"  trial {number}: {why}" for number, why in pruned[:SHOWN_PRUNED]]
    if len(pruned) > SHOWN_PRUNED:
        lines.append(f"  and {len(pruned) - SHOWN_PRUNED} more")
    return lines


SHOWN_REQUEUES = 5
REQUEUED_FATE = {TrialStatus.REQUEUED: "waits to run: the same command resumes the study",
                 TrialStatus.RUNNING: "running"}


def requeue_lines(requeues: list) -> list[str]:
    """What became of each interrupted trial: the trial numbers a study skips are these."""
    if not requeues:
        return []
    lines = ["interrupted trials (none counted as failed; each requeued one runs as the study's next trial number):"]
    for number, again, status in requeues[:SHOWN_REQUEUES]:
        if again is None:
            lines.append(f"  trial {number} interrupted, not requeued (its parameters' retries are spent)")
        else:
            lines.append(f"  trial {number} interrupted, requeued as trial {again} ({REQUEUED_FATE.get(status, status)})")
    if len(requeues) > SHOWN_REQUEUES:
        lines.append(f"  and {len(requeues) - SHOWN_REQUEUES} more (the trials CSV lists every trial's state)")
    return lines


def _baseline_line(spec: StudySpec, report: StudyReport) -> str:
    row = report.baseline.iloc[0]
    shown = ", ".join(f"{m} {_fmt(row[m])}" for m in [*spec.metrics, *spec.report_metrics])
    line = f"baseline ({spec.baseline.name}, trial {row['trial']}): {shown}"
    scale = spec.scale_of(report.study_name)
    if spec.target is not None and scale in spec.target.epochs and report.target is not None:
        line += (f"; target: test accuracy {report.target:.4g}, calibrated (results/targets/{spec.name}-{scale}.json), "
                 "the same for every trial")
    elif spec.targets_from_baseline and report.target is not None:
        line += (f"; target: test accuracy {report.target:.4g}, the baseline's after "
                 f"{spec.baseline.target_epoch(scale)} epoch(s)")
    return line


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "not reached"
        return f"{v:.4g}"
    return str(v)


def markdown(frame: pd.DataFrame) -> str:
    fmt = _fmt

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def write(spec: StudySpec, report: StudyReport, store, parent_run_id: str,
          out_dir: Path | None = None) -> list[Path]:
    """reports/<study>.{md,csv,png}, also logged as artifacts of the study's parent run, with the
    counts and best values as the parent's metrics."""
    out_dir = Path(out_dir or REPORTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = inside(out_dir, report.study_name)  # the name came from a file a user may share
    paths = [stem.with_suffix(".md"), stem.with_suffix(".csv")]
    paths[0].write_text(f"# {spec.title}\n\n{report.text}\n")
    report.front.to_csv(paths[1], index=False)
    if report.all_trials is not None:   # every trial, not only the front: negative results are results
        paths.append(out_dir / f"{report.study_name}-trials.csv")
        report.all_trials.to_csv(paths[-1], index=False)
    if len(report.trials) and len(spec.metrics) >= 1:
        paths.append(_plot(spec, report, stem.with_suffix(".png")))
    plot = next((p.name for p in paths if p.suffix == ".png"), None)
    for path in paths:
        store.log_artifact(parent_run_id, path, "study")
    experiment_id = store.find_experiment(spec.name)
    if experiment_id is not None:
        store.describe_experiment(experiment_id, description(spec, report, experiment_id, parent_run_id, plot))
    # Trial counts are bookkeeping (tags); only the study's findings are metrics, for the UI's charts.
    store.set_tags(parent_run_id, {f"harness.trials_{k}": v for k, v in report.counts.items()})
    metrics = {}
    if len(report.front) and not spec.multi_objective:
        metrics[f"best_{spec.metrics[0]}"] = float(report.front[spec.metrics[0]].iloc[0])
    if spec.multi_objective:
        metrics["pareto_size"] = len(report.front)
    if metrics:
        store.log_metrics(parent_run_id, metrics)
    return paths


def description(spec: StudySpec, report: StudyReport, experiment_id: str, parent_run_id: str,
                plot: str | None) -> str:
    """The experiment's overview in the MLflow UI: what the study searches for, what it has found
    (best trial or Pareto front) and its plot, shown and linked from the parent run's artifacts."""
    space = ", ".join(f"`{name}`" for name in spec.space)
    lines = [f"# {spec.title}", ""]
    if spec.source:
        lines += [f"Source: {spec.source}", ""]
    lines += [f"Optuna study over {space} of experiment `{spec.experiment}`; each trial is a child run of "
              f"the study's parent run, with the same params and metrics as a grid cell.", "",
              report.text.splitlines()[0] + ".", ""]
    if len(report.front):
        heading = "Pareto front" if spec.multi_objective else "Best trial"
        goal = ", ".join(f"{d} `{m}`" for m, d in zip(spec.metrics, spec.directions))
        lines += [f"**{heading}** ({goal}):", "", markdown(report.front.drop(columns=["mlflow_run_id"])), ""]
    else:
        lines += ["No complete trial yet.", ""]
    if plot:
        artifact = f"study/{plot}"
        lines += [f"Plot: [{artifact}]({ui_links.run_artifact(experiment_id, parent_run_id, artifact)}) "
                  "(an artifact of the study's parent run, with the table as .md and .csv)", "",
                  f"![{report.study_name}](get-artifact?path={artifact}&run_uuid={parent_run_id})", ""]
    lines.append("*Written by `harness study` after each invocation, from the study's storage.*")
    return "\n".join(lines) + "\n"


def _plot(spec: StudySpec, report: StudyReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    trials, front = report.trials, report.front
    if spec.multi_objective:
        x, y = spec.metrics[1], spec.metrics[0]
        finite = trials[trials[y].abs() != math.inf]   # a target not reached has no point on this plot
        ax.scatter(finite[x], finite[y], s=18, color="0.6", label="trials")
        line = front[front[y].abs() != math.inf]
        if report.baseline is not None:
            line = line.iloc[1:]   # the baseline row leads the table; it is drawn on its own
        line = line.sort_values(x)
        ax.plot(line[x], line[y], "o-", color="C3", label="Pareto front")
        if report.baseline is not None:
            ax.scatter(report.baseline[x], report.baseline[y], marker="*", s=160, color="C0", zorder=3,
                       label=spec.baseline.name)
        for row in line.itertuples(index=False):
            ax.annotate(str(row.trial), (getattr(row, x), getattr(row, y)), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"{x} ({spec.directions[1]})")
        ax.set_ylabel(f"{y} ({spec.directions[0]})")
    else:
        metric = spec.metrics[0]
        ordered = trials.sort_values("trial")
        ax.plot(ordered["trial"], ordered[metric], "o", color="0.5", label="trials")
        best = ordered[metric].cummax() if spec.directions[0] == "maximize" else ordered[metric].cummin()
        ax.step(ordered["trial"], best, where="post", color="C3", label="best so far")
        ax.set_xlabel("trial")
        ax.set_ylabel(f"{metric} ({spec.directions[0]})")
    ax.set_title(report.study_name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
