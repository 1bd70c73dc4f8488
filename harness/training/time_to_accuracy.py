"""Time to accuracy: the training seconds until a run first met a test accuracy.

Throughput alone can flatter a method that hurts convergence (a bigger batch, fewer filters, lower
precision); the time to reach an accuracy tells the rest. `AccuracyWatch` evaluates the model at
`per_epoch` checkpoints an epoch. The training loop stops its clock for each evaluation, so the
seconds it keeps are training seconds only, and it may end training at the first checkpoint that
meets the target (stop_at_target).

The target is `target_accuracy`, or, for a baseline, `target_from_epoch = N`: the run's own
accuracy at the end of epoch N, so that other runs can be asked to reach what the baseline had
after N epochs. A target never met is recorded as not reached: `target_reached = 0` and no
`time_to_accuracy_s` at all (neither 0 nor the total time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from harness.training.config import RunConfig

METRICS = ("target_accuracy", "target_reached", "time_to_accuracy_s", "epochs_to_accuracy", "epochs_trained")


@dataclass
class Checkpoint:
    epochs: float        # epochs trained so far (2.5 = halfway through the third)
    seconds: float       # training seconds so far (the clock's sum, evaluation outside it)
    samples: int         # training samples so far (this process's, on one rank)
    accuracy: float      # test accuracy at this point


@dataclass
class AccuracyWatch:
    evaluate: Callable[[], float]          # test accuracy of the model now
    target: float = 0.0                    # 0: no target (per-epoch accuracy only)
    from_epoch: int = 0                    # > 0: the target is the accuracy at the end of this epoch
    stop: bool = False                     # end training once the target is met
    per_epoch: int = 1                     # checkpoints per epoch
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: RunConfig, evaluate: Callable[[], float]) -> "AccuracyWatch | None":
        """The watch a config asks for: with a target, or with eval_every_epoch (a study's pruner
        reads the per-epoch accuracy); None when it asks for neither."""
        target, from_epoch, every_epoch = cfg.target_accuracy, cfg.target_from_epoch, cfg.eval_every_epoch
        stop, per_epoch = cfg.stop_at_target, cfg.evals_per_epoch
        targeted = bool(target or from_epoch)
        if not (targeted or every_epoch):
            return None
        return cls(evaluate, target=target, from_epoch=from_epoch, stop=stop, per_epoch=per_epoch if targeted else 1)

    @property
    def targeted(self) -> bool:
        return bool(self.target or self.from_epoch)

    def check(self, *, epochs: float, seconds: float, samples: int) -> float:
        """Evaluate now (the caller's clock is stopped); `seconds` and `samples` are those trained
        since the previous checkpoint, `epochs` the epochs trained in all. Returns the accuracy."""
        last = self.checkpoints[-1] if self.checkpoints else Checkpoint(0.0, 0.0, 0, 0.0)
        accuracy = self.evaluate()
        self.checkpoints.append(Checkpoint(epochs, last.seconds + seconds, last.samples + samples, accuracy))
        return accuracy

    def goal(self) -> float | None:
        """The accuracy to reach; for a baseline, known once its epoch `from_epoch` has ended."""
        if not self.from_epoch:
            return self.target or None
        ended = [c for c in self.checkpoints if c.epochs == self.from_epoch]
        return ended[0].accuracy if ended else None

    @property
    def should_stop(self) -> bool:
        return self.stop and self.reached(self.checkpoints) is not None

    def reached(self, checkpoints: list[Checkpoint]) -> Checkpoint | None:
        """The first checkpoint whose accuracy met the goal, or None."""
        goal = self.goal()
        if goal is None:
            return None
        return next((c for c in checkpoints if c.accuracy >= goal), None)

    def metrics(self, slowest_seconds: list[float] | None = None) -> dict[str, float]:
        """The run's time-to-accuracy metrics (none without a target). In a data-parallel run,
        `slowest_seconds` is the slowest rank's training seconds at each checkpoint."""
        if not self.targeted or not self.checkpoints:
            return {}
        checkpoints = self.checkpoints
        if slowest_seconds is not None:
            checkpoints = [Checkpoint(c.epochs, s, c.samples, c.accuracy) for c, s in zip(checkpoints, slowest_seconds)]
        metrics = {"target_reached": 0.0, "epochs_trained": checkpoints[-1].epochs}
        goal = self.goal()
        if goal is not None:
            metrics["target_accuracy"] = goal
        first = self.reached(checkpoints)
        if first is not None:
            metrics.update(target_reached=1.0, time_to_accuracy_s=first.seconds, epochs_to_accuracy=first.epochs)
        return metrics
