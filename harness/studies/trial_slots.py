"""A study's N trial slots in the claims table, so that K workers on one or many machines finish
exactly N trials between them: each trial first claims a slot, a finished trial releases its slot
as done, and a failed one drops it for the next trial.

A dead worker's slot is taken over: the claim's holder is dead when it ran on this host and its
process is gone, or its heartbeat stopped (another host); whoever takes the slot over requeues the
dead worker's trial (studies/requeue.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.invocation import Log
from harness.store import Claims, Store
from harness.store.claims import Claim, ClaimState
from harness.studies import requeue


@dataclass
class TrialSlots:
    """The `target` slots of one study, in the claims namespace its name gives."""
    study: Any            # optuna.Study
    store: Store
    experiment_id: str
    target: int           # finished trials the study is to have: one slot each
    log: Log
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = [f"slot-{i:05d}" for i in range(self.target)]

    @property
    def namespace(self) -> str:
        """The claims namespace of the study's slots."""
        return f"study:{self.study.study_name}"

    def finished(self, claims: Claims, held: dict[str, Claim] | None = None) -> int:
        """The study's finished trials, counted by their slots (`held`: the claims as just read)."""
        held = claims.all(self.namespace) if held is None else held
        return sum(c.state == ClaimState.DONE for c in held.values())

    def claim(self, claims: Claims, held: dict[str, Claim]):
        """The first slot free or takeable, and its grant; (None, None) when every one is held."""
        for slot in self.names:
            if slot in held and not claims.takeable(held[slot], retake_done=False):
                continue
            grant = claims.claim(self.namespace, slot)
            if grant is not None:
                return slot, grant
        return None, None

    @staticmethod
    def siblings_running(claims: Claims, held: dict[str, Claim]) -> bool:
        """Whether another live worker of this invocation is running a trial."""
        return any(c.state == ClaimState.RUNNING and c.token == claims.token and c.owner != claims.owner
                   and claims.holder_alive(c) for c in held.values())

    def took_over(self, claims: Claims, slot: str, dead: Claim) -> bool:
        """The slot's holder died: close and requeue what it left behind. True when its trial had
        finished already (the slot is then released as done, and no new trial runs in it)."""
        for line in requeue.requeue_trials_of(self.study, self.store, self.experiment_id, dead):
            self.log(line)
        if requeue.told_before_release(self.study, slot):
            self.done(claims, slot, "finished by a worker that died before releasing it")
            return True
        return False

    def done(self, claims: Claims, slot: str, note: str) -> None:
        """A finished trial's slot: it counts toward the target."""
        claims.release(self.namespace, slot, ClaimState.DONE, note=note)

    def drop(self, claims: Claims, slot: str) -> None:
        """A slot whose trial failed, was cut off or never started: free for the next trial."""
        claims.drop(self.namespace, slot)
