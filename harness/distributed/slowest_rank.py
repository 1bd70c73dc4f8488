"""A cell trained on several ranks is timed by its slowest rank, as MLPerf and torchbench time a
distributed run: the ranks start each epoch together after a barrier, and an epoch is over when its
last rank is done. Every experiment that trains on ranks reduces what its ranks gathered here, so
`train_time_s`, the per-epoch steps, `rank{i}_train_time_s` and the time-to-accuracy checkpoints
mean the same in all of them.

Each rank gathers a dict (RankContext.gather): "times", its timed epochs' seconds, and where the
experiment records them, "checkpoints" (its training seconds at each accuracy check), "warmup" (its
untimed warm-up seconds) and "rss" (its peak resident memory, MB). One rank in one process is the
same reduction over a list of one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlowestRank:
    """The ranks' timings, in rank order, and what the cell reports of them."""
    rank_epochs: list[list[float]]        # each rank's timed epochs' seconds
    rank_checkpoints: list[list[float]]   # each rank's training seconds at each accuracy check (empty: none)
    rank_warmups: list[float]             # each rank's warm-up seconds (empty: not gathered)
    rank_rss: list[float]                 # each rank's peak resident memory, MB (empty: not gathered)

    @property
    def epoch_times(self) -> list[float]:
        """Epoch by epoch, the slowest rank's seconds (the per-epoch steps show these)."""
        return [max(seconds) for seconds in zip(*self.rank_epochs)]

    @property
    def rank_times(self) -> list[float]:
        """Each rank's training seconds: its timed epochs summed."""
        return [sum(seconds) for seconds in self.rank_epochs]

    @property
    def train_time_s(self) -> float:
        """The cell's training time: the slowest rank's."""
        return max(self.rank_times)

    @property
    def checkpoints(self) -> list[float]:
        """At each accuracy check, the slowest rank's training seconds so far."""
        return [max(seconds) for seconds in zip(*self.rank_checkpoints)]

    @property
    def warmup_time_s(self) -> float:
        return max(self.rank_warmups)

    def metrics(self, *, each_rank: bool = False, spread: bool = False, memory: bool = False) -> dict[str, float]:
        """`train_time_s`; with `each_rank` also `rank{i}_train_time_s` for every rank, with `spread`
        `rank_time_spread_s` (the slowest rank's time minus the fastest's), with `memory`
        `peak_rss_mb` (the largest rank's: the ranks ran in processes of their own)."""
        metrics = {"train_time_s": self.train_time_s}
        if spread:
            metrics["rank_time_spread_s"] = self.train_time_s - min(self.rank_times)
        if each_rank:
            metrics.update({f"rank{i}_train_time_s": t for i, t in enumerate(self.rank_times)})
        if memory:
            metrics["peak_rss_mb"] = max(self.rank_rss)
        return metrics


def slowest_rank(everyone: list[dict]) -> SlowestRank:
    """The reduction of every rank's gathered dict (see the module's docstring for its keys)."""
    return SlowestRank(rank_epochs=[list(r["times"]) for r in everyone],
                       rank_checkpoints=[list(r.get("checkpoints", [])) for r in everyone],
                       rank_warmups=[r["warmup"] for r in everyone if "warmup" in r],
                       rank_rss=[r["rss"] for r in everyone if "rss" in r])
