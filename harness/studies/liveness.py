"""Which of a study's RUNNING trials still have a live process: Optuna keeps a trial RUNNING after
its worker is SIGKILLed, until another worker takes its slot over. `--status` tells the two apart.

A trial's owner (user attribute "host|pid|start|claims owner") names its process. On this host the
process identity decides (harness/store/process.py); a trial of another host is alive while its
slot's claim keeps its heartbeat (harness/store/claims.py)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.store.process import process_alive, this_process
from harness.studies.trial_status import TrialStatus

# Trial user attributes the study engine writes when it asks for a trial, and read here.
OWNER_ATTR = "harness.owner"   # "host|pid|start|claims owner" of the worker process that asked for it
SLOT_ATTR = "harness.slot"     # the claims slot the trial ran in


@dataclass
class Running:
    number: int
    host: str
    pid: str
    alive: bool


def running_trials(study, db_url: str) -> list[Running]:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not trials:
        return []
    heartbeats = _slot_heartbeats(study.study_name, db_url)
    found = []
    for t in trials:
        host, pid, started, *_ = (str(t.user_attrs.get(OWNER_ATTR, "")).split("|") + ["", "", ""])[:3]
        if host == this_process().host:
            alive = process_alive(pid, started)
        else:
            alive = heartbeats.get(t.user_attrs.get(SLOT_ATTR), False)
        found.append(Running(t.number, host or "?", pid or "?", alive))
    return found


def _slot_heartbeats(study_name: str, db_url: str) -> dict[str, bool]:
    """Slot -> whether its claim's holder is alive, as the claims table says."""
    from harness.store import Claims
    from harness.store.claims import ClaimState

    claims = Claims(db_url)
    try:
        return {key: c.state == ClaimState.RUNNING and claims.holder_alive(c) for key, c in claims.all(f"study:{study_name}").items()}
    finally:
        claims.close()


def status_text(report, running: list[Running]) -> str:
    """The study report's text with its "N running" split into live trials and interrupted ones."""
    gone = [r for r in running if not r.alive]
    lines = report.text.splitlines()
    if not gone:
        return report.text
    live = len(running) - len(gone)
    lines[0] = lines[0].replace(f"{report.counts[TrialStatus.RUNNING]} running",
                                f"{live} running, {len(gone)} interrupted (process gone)")
    names = ", ".join(f"trial {r.number} (process {r.pid} on {r.host})" for r in gone)
    lines.insert(1, f"interrupted: {names}; the next `harness study` on this study requeues "
                    f"{'it' if len(gone) == 1 else 'them'} (never counted as failed)")
    return "\n".join(lines)
