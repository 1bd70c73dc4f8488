"""The bar a launcher shows while its workers run: done of total, read from the shared database
through the engine's `progress()`, and a few words on the workers (`2 running, 1 pending`)."""

from __future__ import annotations

from typing import Callable

from tqdm import tqdm


class FollowBar:
    def __init__(self, progress: Callable[[], tuple[int, int]] | None):
        self.progress = progress
        self.bar: tqdm | None = None  # made at the first reading, when the total is known

    def update(self, workers: str = "") -> None:
        if self.progress is None:
            return
        try:
            done, total = self.progress()
        except Exception:  # a missed reading of the database; the next poll tries again
            return
        if self.bar is None:
            self.bar = tqdm(total=total, desc="workers", unit="done")
        self.bar.total, self.bar.n = total, done
        self.bar.set_postfix_str(workers, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.update()
            self.bar.close()
