"""What a sweep prints when it ends: one line per cell with its first metrics, then the counts."""

from __future__ import annotations

from harness.sweeps.engine import SweepResult


def sweep_summary(result: SweepResult, metrics: list[str] | None = None) -> str:
    """One line per cell with the first three metrics of the sweep's report (default: time,
    accuracy, parameters), then the counts."""
    metrics = (metrics or ["train_time_s", "test_accuracy", "param_count"])[:3]
    widths = [max(len(m), 10) for m in metrics]
    lines = [f"{'cell':<24} {'outcome':<9} " + " ".join(f"{m:>{w}}" for m, w in zip(metrics, widths)) + "  note"]
    for r in result.results:
        values = " ".join(_cell_value(r.metrics.get(m, float("nan")), w) for m, w in zip(metrics, widths))
        lines.append(f"{r.cell.label:<24} {r.outcome:<9} {values}  {r.reason or ''}")
    lines += drift_lines(result)
    counts = ", ".join(f"{n} {o}" for o, n in result.counts().items())
    lines.append(f"sweep {result.name} ({result.scale}): {len(result.results)} cells: {counts}, "
                 f"in {result.seconds:.0f} s; parent run {result.parent_run_id}; "
                 f"report: harness report {result.name}")
    return "\n".join(lines)


def _cell_value(value: float, width: int) -> str:
    if value == value and float(value).is_integer() and abs(value) >= 1e5:  # counts: every digit
        return f"{value:>{width}.0f}"
    return f"{value:>{width}.6g}"


def drift_lines(result: SweepResult) -> list[str]:
    """The reused cells measured on a machine of another speed, named: their times are not today's."""
    from harness.calibration import DRIFT_TOLERANCE

    drifted = result.drifted()
    if not drifted:
        return []
    return [f"{len(drifted)} reused cell(s) were measured at a speed_index more than {DRIFT_TOLERANCE:.0%} from "
            f"today's {result.speed_index:.3g}: " + ", ".join(r.cell.label for r in drifted)
            + f"; their ratios with today's cells mix two machines' speeds (`harness sweep {result.name} "
            "--remeasure-drifted` measures them again)"]
