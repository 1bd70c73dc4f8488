"""Time to accuracy: the training seconds until a run first met a test accuracy.

Throughput alone can flatter a method that hurts convergence (a bigger batch, fewer filters, lower
precision); the time to reach an accuracy tells the rest. `AccuracyWatch` evaluates the model at
`per_epoch` checkpoints an epoch, or every `every` training steps (check_every_samples: a fine clock).
The training loop stops its clock for each evaluation, so the seconds it keeps are training seconds
only, and it may end training at the first checkpoint that meets the target (stop_at_target).

With a probe (probe_size, harness/training/accuracy_probe.py) each check reads a fixed stratified part of the
test set, and a check within two standard errors of the target there is confirmed on the whole test
set: only whole-set accuracies count, so the time is the first confirmed crossing. `time_to_accuracy_resolution_s` goes
with every time to accuracy: the training seconds between the crossing check and the check before
it, the window the true crossing lies in.

The target is `target_accuracy`, or, for a baseline, `target_from_epoch = N`: the run's own
accuracy at the end of epoch N, so that other runs can be asked to reach what the baseline had
after N epochs. A target never met is recorded as not reached: `target_reached = 0` and no
`time_to_accuracy_s` at all (neither 0 nor the total time).

`give_up_after_s` ends training at the first check past that many training seconds without the
target (`gave_up = 1`): a study's trial already several times slower than its reference cannot win,
and the epochs it has left would only say by how much. In a data-parallel run rank 0's clock
decides for every rank (`agree`), so that no rank stops while another waits in a collective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from harness.fields.config import RunConfig
from harness.errors import UserError

METRICS = ("target_accuracy", "target_reached", "time_to_accuracy_s", "time_to_accuracy_resolution_s",
           "epochs_to_accuracy", "epochs_trained", "accuracy_checks", "best_test_accuracy", "gave_up")


@dataclass
class Checkpoint:
    epochs: float        # epochs trained so far (2.5 = halfway through the third)
    seconds: float       # training seconds so far (the clock's sum, evaluation outside it)
    samples: int         # training samples so far (this process's, on one rank)
    accuracy: float      # test accuracy at this point (the probe's, unless `whole`)
    whole: bool = True   # measured on the whole test set (a probe's crossing, confirmed)


@dataclass
class AccuracyWatch:
    evaluate: Callable[[], float]          # test accuracy of the model now
    target: float = 0.0                    # 0: no target (per-epoch accuracy only)
    from_epoch: int = 0                    # > 0: the target is the accuracy at the end of this epoch
    stop: bool = False                     # end training once the target is met
    per_epoch: int = 1                     # checkpoints per epoch
    every: int = 0                         # > 0: a checkpoint every this many steps instead
    confirm: Callable[[], float] | None = None   # with a probe: the whole test set's accuracy (evaluate: the probe's)
    probe_n: int = 0                       # the probe's images: how far its reading may fall short of the whole set's
    give_up_s: float = 0.0                 # > 0: stop at the first check past these training seconds, short of it
    agree: Callable[[bool], bool] | None = None   # data-parallel: every rank gets rank 0's decision to give up
    gave_up: bool = False
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: RunConfig, evaluate: Callable[[], float], probe: Callable[[], float] | None = None,
                    agree: Callable[[bool], bool] | None = None) -> "AccuracyWatch | None":
        """The watch a config asks for: with a target, or with eval_every_epoch (a study's pruner
        reads the per-epoch accuracy); None when it asks for neither. `probe`: the accuracy on the
        probe (an experiment that has none cannot take probe_size); `agree`: in a data-parallel run,
        rank 0's decision to give up, broadcast (collective: every rank calls it at every check)."""
        target, from_epoch, every_epoch = cfg.target_accuracy, cfg.target_from_epoch, cfg.eval_every_epoch
        stop, per_epoch = cfg.stop_at_target, cfg.evals_per_epoch
        targeted = bool(target or from_epoch)
        if not (targeted or every_epoch):
            return None
        if not targeted:
            return cls(evaluate)
        every, size = check_every_steps(cfg), getattr(cfg, "probe_size", 0)
        late = {"give_up_s": getattr(cfg, "give_up_after_s", 0.0), "agree": agree}
        if size and probe is None:
            raise UserError(f"experiment {cfg.experiment} checks the whole test set only; probe_size needs "
                            "one whose checks can read a probe (recipe, airbench).")
        if size:
            return cls(probe, target=target, from_epoch=from_epoch, stop=stop, per_epoch=per_epoch, every=every,
                       confirm=evaluate, probe_n=size, **late)
        return cls(evaluate, target=target, from_epoch=from_epoch, stop=stop, per_epoch=per_epoch, every=every, **late)

    @property
    def targeted(self) -> bool:
        return bool(self.target or self.from_epoch)

    def bounds(self, steps: int) -> list[int]:
        """The steps of an epoch of `steps` after which to check (the last always among them)."""
        if self.every:
            return [*range(self.every, steps, self.every), steps]
        parts = min(self.per_epoch, steps)
        return sorted({max(steps * (k + 1) // parts, 1) for k in range(parts)})

    def check(self, *, epochs: float, seconds: float, samples: int) -> float:
        """Evaluate now (the caller's clock is stopped); `seconds` and `samples` are those trained
        since the previous checkpoint, `epochs` the epochs trained in all. Returns the accuracy."""
        last = self.checkpoints[-1] if self.checkpoints else Checkpoint(0.0, 0.0, 0, 0.0)
        accuracy, whole = self.evaluate(), self.confirm is None
        if not whole:
            goal = self.goal()
            # a probe's crossing is confirmed on the whole set, and so is a baseline's target epoch
            if (goal is not None and accuracy >= goal - self.slack(goal)) or (self.from_epoch and epochs == self.from_epoch):
                accuracy, whole = self.confirm(), True
        self.checkpoints.append(Checkpoint(epochs, last.seconds + seconds, last.samples + samples, accuracy, whole))
        if self.give_up_s and self.target:   # a baseline's own target (from_epoch) is never given up on
            late = self.reached(self.checkpoints) is None and self.checkpoints[-1].seconds >= self.give_up_s
            self.gave_up = self.agree(late) if self.agree is not None else late
        return accuracy

    def slack(self, goal: float) -> float:
        """Two standard errors of a probe's accuracy at the goal: a probe reading within them of the
        goal is confirmed on the whole set, so that a probe that happens to read low near a plateau
        does not hold back a crossing the whole set has made (at most a 2.3% chance per check)."""
        return 2 * math.sqrt(goal * (1 - goal) / self.probe_n) if self.probe_n else 0.0

    def goal(self) -> float | None:
        """The accuracy to reach; for a baseline, known once its epoch `from_epoch` has ended."""
        if not self.from_epoch:
            return self.target or None
        ended = [c for c in self.checkpoints if c.epochs == self.from_epoch and c.whole]
        return ended[0].accuracy if ended else None

    @property
    def should_stop(self) -> bool:
        return self.gave_up or (self.stop and self.reached(self.checkpoints) is not None)

    def reached(self, checkpoints: list[Checkpoint]) -> Checkpoint | None:
        """The first checkpoint whose accuracy met the goal, or None."""
        goal = self.goal()
        if goal is None:
            return None
        return next((c for c in checkpoints if c.whole and c.accuracy >= goal), None)

    def metrics(self, slowest_seconds: list[float] | None = None) -> dict[str, float]:
        """The run's time-to-accuracy metrics (none without a target). In a data-parallel run,
        `slowest_seconds` is the slowest rank's training seconds at each checkpoint."""
        if not self.targeted or not self.checkpoints:
            return {}
        checkpoints = self.checkpoints
        if slowest_seconds is not None:
            checkpoints = [Checkpoint(c.epochs, s, c.samples, c.accuracy, c.whole)
                           for c, s in zip(checkpoints, slowest_seconds)]
        metrics = {"target_reached": 0.0, "epochs_trained": checkpoints[-1].epochs,
                   "accuracy_checks": float(len(checkpoints))}
        if self.gave_up:
            metrics["gave_up"] = 1.0
        whole = [c.accuracy for c in checkpoints if c.whole]
        if whole:   # the best the run had at any whole-set check (a calibration's reference reads it)
            metrics["best_test_accuracy"] = max(whole)
        goal = self.goal()
        if goal is not None:
            metrics["target_accuracy"] = goal
        first = self.reached(checkpoints)
        if first is not None:
            at = checkpoints.index(first)
            before = checkpoints[at - 1].seconds if at else 0.0
            metrics.update(target_reached=1.0, time_to_accuracy_s=first.seconds, epochs_to_accuracy=first.epochs,
                           time_to_accuracy_resolution_s=first.seconds - before)
        return metrics


def check_every_steps(cfg: RunConfig) -> int:
    """The steps between checks that `check_every_samples` asks for: that many samples in whole steps of
    the run's global batch (each rank's batch times the ranks, unless batch_size is global), at least
    one; 0 when it is not set."""
    samples = getattr(cfg, "check_every_samples", 0)
    if not samples:
        return 0
    ranks = 1 if getattr(cfg, "batch_is_global", True) else getattr(cfg, "world_size", 1)
    return max(1, round(samples / (cfg.batch_size * ranks)))
