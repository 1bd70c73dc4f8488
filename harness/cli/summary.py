"""What a sweep prints when it ends: one line per cell with its first metrics, rounded as the report
rounds them and with the report's notes (a row the sweep file annotates; a contended cell marked,
its load said once below the cells), then the counts. Every command it prints runs as pasted: it
keeps the sweep's scale, overrides and store (harness/rerun.py)."""

from __future__ import annotations

from harness.machine.machine_load import CONTENDED
from harness.report.contention import busy_cores
from harness.report.render import format_value
from harness.report.tables import cell_note
from harness.rerun import Rerun
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
                 f"{ran}; {parent}; report: `{rerun_of(result).report_command()}`")
    return "\n".join(lines)


def rerun_of(result: SweepResult) -> Rerun:
    """The command that measured the result's cells (the sweep's name and scale alone for a result
    made without one)."""
    return result.rerun or Rerun(result.name, result.scale)


def drift_lines(result: SweepResult) -> list[str]:
    """The reused cells measured on a machine of another speed, named: their times are not today's."""
    from harness.machine.calibration import DRIFT_TOLERANCE, SPEED_INDEX_WORDS

    drifted = result.drifted()
    if not drifted:
        return []
    return [f"{len(drifted)} reused cell(s) were measured at a speed_index more than {DRIFT_TOLERANCE:.0%} from "
            f"today's {result.speed_index:.3g} ({SPEED_INDEX_WORDS}; {DRIFT_TOLERANCE:.0%} is beyond its own noise "
            "on an idle machine): " + ", ".join(r.cell.label for r in drifted)
            + f"; their ratios with today's cells mix two machines' speeds "
            f"(`{rerun_of(result).sweep_command('--remeasure-drifted')}` measures them again)"]


def contended_lines(result: SweepResult) -> list[str]:
    """One line: how many finished cells were timed while other work held the cores, how many cores
    it held, and the command that measures them again. Said once here, not on each cell's line."""
    contended = result.contended()
    if not contended:
        return []
    return [f"{len(contended)} of {len(result.results)} cell(s) were timed while other work held "
            f"{busy_cores([r.metrics for r in contended])} cores (contended: the report shows their times and "
            "speed-ups marked 'contended, not judged', and no check rests on them): "
            f"`{rerun_of(result).sweep_command('--remeasure-contended')}` measures them again"]


def _note(result, notes: list[dict]) -> str:
    """The failure or skip reason, what the report would note beside the cell, and "contended"
    where other work held the cores (how many: the line below the cells)."""
    params = {k: str(v) for k, v in (result.cell.values or {}).items()}
    as_run = RunRecord(result.run_id or "", result.cell.label, "FINISHED", params, dict(result.metrics), {}, 0)
    contended = "contended" if result.metrics.get(CONTENDED) == 1 else ""
    return "; ".join(p for p in (result.reason or "", cell_note(notes, as_run), contended) if p)
