"""Who runs what: a claims table in the shared database (SQLite on one machine, PostgreSQL across
machines). Every grid cell and every study trial slot is claimed before it runs, by every process,
so two sweeps started on one store, or K workers of one sweep, never run a cell twice.

A claim is one row keyed by (namespace, key): a grid cell's `cell_id`, or a study's trial slot.
Taking a free key is an INSERT, which the primary key makes atomic: of two workers racing for a
cell exactly one gets it. A key whose holder died can be taken over with a compare-and-set UPDATE
(only if the row is still the one that was read), so a dead worker's cell is run by another and
still by only one. A holder is dead when it ran on this host and its process is gone, or ran
elsewhere and its heartbeat is older than STALE_S.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa

from harness.store import shared_db
from harness.store.faults import refused_as_fault
from harness.store.process import process_alive, this_process


class ClaimState(StrEnum):
    """A claim's row, as the claims table stores it (column `state`)."""
    RUNNING = "running"   # its holder runs it now, or died doing so (see `holder_alive`)
    DONE = "done"         # finished: taken again only when asked (`retake_done`)
    FAILED = "failed"     # failed: the next invocation tries it again, this one does not


SHARED_DB = "the shared database (claims)"
HEARTBEAT_S = 10.0
STALE_S = 120.0

_metadata = sa.MetaData()
CLAIMS = sa.Table(
    "harness_claims", _metadata,
    sa.Column("namespace", sa.String(255), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("owner", sa.String(64), nullable=False),     # one worker process
    sa.Column("token", sa.String(64), nullable=False),     # one invocation (a launcher and its workers)
    sa.Column("host", sa.String(255)),
    sa.Column("pid", sa.Integer),
    sa.Column("pid_start", sa.Float),
    sa.Column("heartbeat", sa.Float, nullable=False),
    sa.Column("note", sa.String(255)),
)


@dataclass
class Grant:
    previous: "Claim | None"  # the row this claim replaced: a dead holder's, a failed or finished one


@dataclass
class Claim:
    namespace: str
    key: str
    state: ClaimState
    owner: str
    token: str
    host: str | None
    pid: int | None
    pid_start: float | None
    heartbeat: float
    note: str | None


class Claims:
    """The claims of one worker process."""

    def __init__(self, url: str, token: str | None = None):
        self.engine = shared_db.create_engine(url)
        self.owner = uuid.uuid4().hex
        self.token = token or new_token()
        me = this_process()
        self.host, self.pid, self.pid_start = me.host, me.pid, me.started
        self._held: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._create_table()
        self._beat = threading.Thread(target=self._heartbeat_loop, name="claims-heartbeat", daemon=True)
        self._beat.start()

    @refused_as_fault(SHARED_DB, "create the claims table")
    def _create_table(self) -> None:
        for attempt in range(5):
            try:
                _metadata.create_all(self.engine, checkfirst=True)
                return
            except sa.exc.DBAPIError:  # another worker created it between the check and the CREATE
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def close(self) -> None:
        self._stop.set()
        self._beat.join(timeout=2)
        self.engine.dispose()

    # --- reading --------------------------------------------------------------------------------
    @refused_as_fault(SHARED_DB, "list claims")
    def all(self, namespace: str) -> dict[str, Claim]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(CLAIMS).where(CLAIMS.c.namespace == namespace)).fetchall()
        return {r.key: _claim(r) for r in rows}

    def holder_alive(self, claim: Claim) -> bool:
        if claim.host == self.host:
            return process_alive(claim.pid, claim.pid_start)
        return time.time() - claim.heartbeat < STALE_S

    def takeable(self, claim: Claim, *, retake_done: bool) -> bool:
        """May this worker take the key? Never a live holder's; never a key that failed in this same
        invocation (each invocation tries a failing cell once); a finished one only if asked."""
        if claim.state == ClaimState.RUNNING:
            return not self.holder_alive(claim)
        if claim.state == ClaimState.FAILED:
            return claim.token != self.token
        return retake_done

    # --- taking and releasing -------------------------------------------------------------------
    @refused_as_fault(SHARED_DB, "record a claim")
    def claim(self, namespace: str, key: str, *, retake_done: bool = False, note: str = "") -> Grant | None:
        """A Grant when this worker now holds the key (and must run it), else None. The grant says
        who held the key before (None for a key never claimed), so a taker-over can clean up."""
        values = dict(state=str(ClaimState.RUNNING), owner=self.owner, token=self.token, host=self.host, pid=self.pid,
                      pid_start=self.pid_start, heartbeat=time.time(), note=note[:255])
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(CLAIMS).values(namespace=namespace, key=key, **values))
            current = None
        except sa.exc.IntegrityError:
            current = self.get(namespace, key)
            if current is None or not self.takeable(current, retake_done=retake_done):
                return None
            with self.engine.begin() as conn:  # compare-and-set: only if nobody took it since we read
                taken = conn.execute(
                    sa.update(CLAIMS)
                    .where(CLAIMS.c.namespace == namespace, CLAIMS.c.key == key,
                           CLAIMS.c.owner == current.owner, CLAIMS.c.state == str(current.state),
                           CLAIMS.c.heartbeat == current.heartbeat)
                    .values(**values)).rowcount
            if taken != 1:
                return None
        with self._lock:
            self._held.add((namespace, key))
        return Grant(current)

    @refused_as_fault(SHARED_DB, "read a claim")
    def get(self, namespace: str, key: str) -> Claim | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(CLAIMS).where(CLAIMS.c.namespace == namespace,
                                                       CLAIMS.c.key == key)).fetchone()
        return _claim(row) if row else None

    @refused_as_fault(SHARED_DB, "release a claim")
    def release(self, namespace: str, key: str, state: ClaimState, note: str = "") -> None:
        """Mark a held key done or failed (failed keys are taken again by the next invocation)."""
        with self._lock:
            self._held.discard((namespace, key))
        with self.engine.begin() as conn:
            conn.execute(sa.update(CLAIMS)
                         .where(CLAIMS.c.namespace == namespace, CLAIMS.c.key == key,
                                CLAIMS.c.owner == self.owner)
                         .values(state=str(state), heartbeat=time.time(), note=note[:255]))

    @refused_as_fault(SHARED_DB, "drop a claim")
    def drop(self, namespace: str, key: str) -> None:
        """Give a held key back unused (a study's failed trial leaves its slot to the next one)."""
        with self._lock:
            self._held.discard((namespace, key))
        with self.engine.begin() as conn:
            conn.execute(sa.delete(CLAIMS).where(CLAIMS.c.namespace == namespace, CLAIMS.c.key == key,
                                                 CLAIMS.c.owner == self.owner))

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                held = list(self._held)
            for namespace, key in held:
                try:
                    with self.engine.begin() as conn:
                        conn.execute(sa.update(CLAIMS)
                                     .where(CLAIMS.c.namespace == namespace, CLAIMS.c.key == key,
                                            CLAIMS.c.owner == self.owner)
                                     .values(heartbeat=time.time()))
                except Exception:  # a missed beat is retried in HEARTBEAT_S; STALE_S allows many
                    pass


def _claim(row) -> Claim:
    return Claim(**{**row._mapping, "state": ClaimState(row.state)})


def new_token() -> str:
    """One invocation's id: the launcher and all its workers share it."""
    me = this_process()
    return f"{me.host}-{me.pid}-{uuid.uuid4().hex[:8]}"
