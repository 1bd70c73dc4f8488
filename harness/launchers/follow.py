"""The bar a launcher shows while its workers run: done of total, read from the shared database
through the engine's `progress()`, and a few words on the workers (`2 running, 1 pending`).

A reading that fails (the database busy or out of reach for a moment) does not stop the launcher:
the bar keeps its last reading, or shows the workers' words alone before the first one, and the
next poll tries again. The first failure is said once on stderr, with its reason, so a bar that
never moves is not a mystery."""

from __future__ import annotations

import sys
from typing import Callable

from tqdm import tqdm

from harness.errors import first_line
from harness.store.uris import hide_passwords


class FollowBar:
    def __init__(self, progress: Callable[[], tuple[int, int]] | None):
        self.progress = progress
        self.bar: tqdm | None = None     # made at the first update, with the total once it is known
        self.unread: str | None = None   # why a reading failed, once said

    def update(self, workers: str = "") -> None:
        if self.progress is None:
            return
        reading = self._read()
        if self.bar is None:
            self.bar = tqdm(total=reading[1] if reading else None, desc="workers", unit="done")
        if reading is not None:
            self.bar.total, self.bar.n = reading[1], reading[0]
        self.bar.set_postfix_str(workers, refresh=False)
        self.bar.refresh()

    def say(self, line: str) -> None:
        """A line on stderr above the bar (or alone, with bars off), its URLs' passwords hidden."""
        tqdm.write(hide_passwords(line), file=sys.stderr)

    def _read(self) -> tuple[int, int] | None:
        try:
            done, total = self.progress()
        except Exception as err:  # the database missed a reading; the next poll tries again
            if self.unread is None:
                self.unread = first_line(err)
                self.say(f"harness: warning: the workers' progress cannot be read from the shared database "
                         f"({self.unread}); the bar shows their last reading until one succeeds, and the "
                         "workers go on.")
            return None
        return done, total

    def close(self) -> None:
        if self.bar is not None:
            self.update()
            self.bar.close()
