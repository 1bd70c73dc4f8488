"""Is a store usable? Asked before anything is written, and answered within PROBE_TIMEOUT_S with
one sentence, whatever the scheme: MLflow and SQLAlchemy would otherwise retry a dead server or a
corrupt file for about two minutes, printing a page of warnings, and a read-only file would fail
only at the first write, in the middle of a sweep.

Also: a new SQLite file is created whole or not at all (built beside its target, then renamed), so
a disk that fills up half-way through MLflow's forty schema migrations leaves nothing behind that
a later run would trip over ("duplicate column name").
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from harness.errors import UserError, first_line
from harness.store.uris import hide_password, redact

PROBE_TIMEOUT_S = 8.0   # a probe gives up after waiting this long on the server; on an idle machine the check stays under 10 s
# A starved process (other work holding the cores) may take this many times PROBE_TIMEOUT_S of wall
# time before its probe has waited PROBE_TIMEOUT_S on the server itself.
STARVED_STRETCH = 15


def check_sqlite(path: Path, what: str) -> None:
    """`what` (e.g. "the tracking store sqlite:///x.db") must be a SQLite file this process can read
    and write, in a folder that takes new files (its -wal and -shm); a missing file is fine (it is
    created later) when the folder takes files."""
    check_folder_writable(path.parent, f"the folder of {what}")
    if not path.exists():
        return
    try:
        # mode=rw: never create the file here; a file SQLite may only read opens read-only and
        # then refuses BEGIN IMMEDIATE, which is how a read-only file is told apart.
        connection = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=PROBE_TIMEOUT_S / 2)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            # A write that is rolled back: nothing reaches the file, but SQLite checks it may write
            # (the write lock alone is granted on a read-only file in WAL mode).
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("CREATE TABLE harness_write_probe (x INTEGER)")
            connection.rollback()
        finally:
            connection.close()
    except sqlite3.OperationalError as err:
        if "locked" in str(err):  # another process is writing to it right now: it is writable
            return
        raise UserError(f"{what} cannot be written ({err}); make the file writable, or pass another "
                        "location.") from None
    except sqlite3.DatabaseError as err:  # "file is not a database", "database disk image is malformed"
        raise UserError(f"{what} is not a usable SQLite database ({err}); move the file aside (it may "
                        "be restored from a backup) or pass another location.") from None


def check_folder_writable(folder: Path, what: str) -> None:
    """The folder exists (created if needed) and takes a new file: true of a read-only mount, an
    immutable folder or a full disk only when asked by trying."""
    probe = folder / f".harness-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{what} ({folder}) does not take new files ({err.strerror}); make it writable "
                        "or pass another location.") from None


def check_server(url: str, what: str, make_engine: Callable[[str], object]) -> None:
    """Connect once to a database server, in a thread given PROBE_TIMEOUT_S of waiting on it: a
    closed port answers at once, a silent host or a DNS lookup that hangs does not, and neither may
    hold the user for minutes. `make_engine` builds the SQLAlchemy engine (with the driver's own
    connect timeout).

    Waiting on the server is the probe's wall time less the time its thread ran (importing the
    driver, the handshake) or waited for a CPU: two workers starved of CPU beside other work took
    over 8 s of wall time to import and connect to a healthy local PostgreSQL, and were told it did
    not answer. A silent server leaves the thread asleep, which counts in full."""
    outcome: dict[str, BaseException | None] = {}

    def connect() -> None:
        try:
            engine = make_engine(url)
            try:
                with engine.connect():
                    pass
            finally:
                engine.dispose()
            outcome["error"] = None
        except BaseException as err:  # reported below, in the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=connect, name="store-probe", daemon=True)
    started = time.monotonic()
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
        elapsed = time.monotonic() - started
        if elapsed - _ran_or_queued_s(thread) >= PROBE_TIMEOUT_S or elapsed >= PROBE_TIMEOUT_S * STARVED_STRETCH:
            break
    if "error" not in outcome:
        raise UserError(f"{what} {redact(url)} did not answer within {PROBE_TIMEOUT_S:.0f} s; check the host "
                        "and port, or pass another location.")
    err = outcome["error"]
    if isinstance(err, ModuleNotFoundError):
        raise UserError(f"{what} {redact(url)} needs the Python driver '{err.name}', which is not installed; "
                        "`make install` installs psycopg for PostgreSQL.")
    if err is not None:
        cause = err.__cause__ or err
        raise UserError(f"cannot reach {what} {redact(url)}: {hide_password(first_line(cause), url)}")


def _ran_or_queued_s(thread: threading.Thread) -> float:
    """Seconds `thread` has run on a CPU or waited in the run queue for one (Linux's schedstat);
    its CPU time alone where that file is missing; 0 where neither can be read."""
    try:
        ran_ns, queued_ns, _ = Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()
        return (int(ran_ns) + int(queued_ns)) / 1e9
    except (OSError, ValueError):
        pass
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return 0.0


def create_sqlite_whole(path: Path, what: str, build: Callable[[Path], None]) -> None:
    """Make the SQLite file `path` with `build(temporary_path)` (which must close every connection
    it opened), beside the target, then rename it into place: readers and later runs see either no
    file or a complete one. The caller holds a lock against a concurrent creator."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.new")
    leftovers = [temporary, *(temporary.with_name(temporary.name + s) for s in ("-wal", "-shm", "-journal"))]
    try:
        build(temporary)
        connection = sqlite3.connect(temporary)
        try:
            # One self-contained file to rename: the WAL folded in and switched off (each process
            # that opens the store turns WAL on again for itself).
            connection.execute("PRAGMA journal_mode = DELETE").fetchone()
        finally:
            connection.close()
        os.replace(temporary, path)
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"cannot create {what}: {first_line(err)}; nothing was left behind, so the same "
                        "command can try again once that is fixed.") from None
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
