"""What a study has found, read back from its storage: trial counts by state, the best trial (one
objective) or the Pareto front (several), as a table and a plot written under reports/ and logged
with the study's parent run in MLflow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.report.tables import REPORTS_DIR
from harness.studies.spec import StudySpec

STATES = ("complete", "pruned", "fail", "running", "waiting")


@dataclass
class StudyReport:
    study_name: str
    counts: dict[str, int]
    front: pd.DataFrame           # best trial (one row) or the Pareto front, best first
    trials: pd.DataFrame          # every complete trial, for the plot
    text: str = ""


def build(spec: StudySpec, study) -> StudyReport:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    counts = {s: sum(t.state.name.lower() == s for t in trials) for s in STATES}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete:
        best = study.best_trials if spec.multi_objective else [study.best_trial]
    else:
        best = []
    front = _frame(spec, best)
    if len(front):
        front = front.sort_values(spec.metrics[0], ascending=spec.directions[0] == "minimize")
    report = StudyReport(study.study_name, counts, front.reset_index(drop=True), _frame(spec, complete))
    report.text = to_text(spec, report)
    return report


def _frame(spec: StudySpec, trials) -> pd.DataFrame:
    rows = []
    for t in trials:
        row = {"trial": t.number, **{k: t.params.get(k) for k in spec.space}}
        row.update(dict(zip(spec.metrics, t.values or [])))
        row["mlflow_run_id"] = t.user_attrs.get("mlflow_run_id", "")
        rows.append(row)
    return pd.DataFrame(rows, columns=["trial", *spec.space, *spec.metrics, "mlflow_run_id"])


def to_text(spec: StudySpec, report: StudyReport) -> str:
    c = report.counts
    lines = [f"study {report.study_name}: {c['complete']} complete, {c['pruned']} pruned, {c['fail']} failed, "
             f"{c['running']} running, {c['waiting']} waiting"]
    if not len(report.front):
        lines.append("no complete trial yet")
        return "\n".join(lines)
    heading = "Pareto front" if spec.multi_objective else "best so far"
    goal = ", ".join(f"{d} {m}" for m, d in zip(spec.metrics, spec.directions))
    lines.append(f"{heading} ({goal}):")
    lines.append(markdown(report.front.drop(columns=["mlflow_run_id"])))
    return "\n".join(lines)


def markdown(frame: pd.DataFrame) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

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
    stem = out_dir / report.study_name
    paths = [stem.with_suffix(".md"), stem.with_suffix(".csv")]
    paths[0].write_text(f"# {spec.title}\n\n{report.text}\n")
    report.front.to_csv(paths[1], index=False)
    if len(report.trials) and len(spec.metrics) >= 1:
        paths.append(_plot(spec, report, stem.with_suffix(".png")))
    for path in paths:
        store.log_artifact(parent_run_id, path, "study")
    experiment_id = store.find_experiment(spec.name)
    if experiment_id is not None:
        plot = paths[2].name if len(paths) > 2 else None
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
        lines += [f"Plot: [{artifact}](#/experiments/{experiment_id}/runs/{parent_run_id}/artifacts/{artifact}) "
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
        ax.scatter(trials[x], trials[y], s=18, color="0.6", label="trials")
        line = front.sort_values(x)
        ax.plot(line[x], line[y], "o-", color="C3", label="Pareto front")
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
