"""What a sweep prints when it ends: one line per cell with its first metrics, rounded as the report
rounds them and with the report's notes (a contended cell, a row the sweep file annotates), then
the counts."""

from __future__ import annotations

from harness.report.render import format_value
from harness.report.tables import cell_note
from harness.store import RunRecord
from harness.sweeps.sweep_engine import SweepResult


def sweep_summary(result: SweepResult, metrics: list[str] | None = None, notes: list[dict] | None = None) -> str:
    """One line per cell with the first three metrics of the sweep's report (default: time,
    accuracy, parameters), then the counts. `notes`: the sweep file's [report] notes."""
    metrics = (metrics or ["train_time_s", "test_accuracy", "param_count"])[:3]
    widths = [max(len(m), 10) for m in metrics]
    lines = [f"{'cell':<24} {'outcome':<9} " + " ".join(f"{m:>{w}}" for m, w in zip(metrics, widths)) + "  note"]
    for r in result.results:
        values = " ".join(f"{format_value(m, r.metrics.get(m, float('nan'))):>{w}}" for m, w in zip(metrics, widths))
        lines.append(f"{r.cell.label:<24} {r.outcome:<9} {values}  {_note(r, notes or [])}".rstrip())
    lines += drift_lines(result) + contended_lines(result)
    counts = ", ".join(f"{n} {o}" for o, n in result.counts().items())
    parent = f"parent run {result.parent_run_id}" if result.parent_run_id else "no parent run"
    ran = "nothing to run: every cell was finished before" if result.results and \
        result.count("reused") == len(result.results) else f"in {result.seconds:.0f} s"
    lines.append(f"sweep {result.name} ({result.scale}): {len(result.results)} cells: {counts}, "
                 f"{ran}; {parent}; report: harness report {result.name}")
    return "\n".join(lines)


def drift_lines(result: SweepResult) -> list[str]:
    """The reused cells measured on a machine of another speed, named: their times are not today's."""
    from harness.machine.calibration import DRIFT_TOLERANCE, SPEED_INDEX_WORDS

    drifted = result.drifted()
    if not drifted:
        return []
    return [f"{len(drifted)} reused cell(s) were measured at a speed_index more than {DRIFT_TOLERANCE:.0%} from "
            f"today's {result.speed_index:.3g} ({SPEED_INDEX_WORDS}; {DRIFT_TOLERANCE:.0%} is beyond its own noise "
            "on an idle machine): " + ", ".join(r.cell.label for r in drifted)
            + f"; their ratios with today's cells mix two machines' speeds (`harness sweep {result.name} "
            "--remeasure-drifted` measures them again)"]


def contended_lines(result: SweepResult) -> list[str]:
    """One line: how many finished cells were timed while other work held the cores, and the command
    that measures them again (the report leaves their times out of speed-ups and checks)."""
    contended = result.contended()
    if not contended:
        return []
    return [f"{len(contended)} of {len(result.results)} cell(s) were timed while other work held the cores "
            f"(contended; the report marks them and leaves their times out of speed-ups and checks): "
            f"`harness sweep {result.name} --scale {result.scale} --remeasure-contended` measures them again"]


def _note(result, notes: list[dict]) -> str:
    """The failure or skip reason, then what the report would note beside the cell."""
    params = {k: str(v) for k, v in (result.cell.values or {}).items()}
    as_run = RunRecord(result.run_id or "", result.cell.label, "FINISHED", params, dict(result.metrics), {}, 0)
    return "; ".join(p for p in (result.reason or "", cell_note(notes, as_run)) if p)
