"""How Optuna searches a study: the sampler that proposes each trial and the pruner that stops a weak
one early. They are a study file's `[sampler]` and `[pruner]` tables, told apart by `name`, as typed
models holding the only defaults there are; each makes its Optuna object. A mistyped table is one
sentence when the study file loads, before any trial runs.

    [sampler]                   # tpe (the default), random, nsga2 or qmc
    name = "tpe"
    seed = 0                    # a rerun continues from seed + the trials already made
    n_startup_trials = 5        # random trials before TPE models the results

    [pruner]                    # none (the default), median, percentile, successive_halving, hyperband, threshold
    name = "median"
    metric = "epoch_test_accuracy"  # what each epoch reports to it (experiments log it with eval_every_epoch)
    n_startup_trials = 3        # trials finished before it prunes any
    n_warmup_steps = 1          # epochs (counted from 0) a trial runs before it may be pruned
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from harness.errors import describe

EPOCH_METRIC = "epoch_test_accuracy"


class _Kind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str

    def as_logged(self) -> dict[str, Any]:
        """The table as the study's parent run logs it: the name, then what the file set."""
        return {"name": self.name, **self.model_dump(exclude_unset=True, exclude={"name"})}


# --- samplers -------------------------------------------------------------------------------------
class Sampler(_Kind):
    seed: int = 0   # the first trial's; a rerun (or another worker) moves it past the trials already made

    def to_optuna(self, seed: int):
        raise NotImplementedError


class TPE(Sampler):
    name: Literal["tpe"] = "tpe"
    n_startup_trials: int = Field(5, ge=0)   # random trials before TPE models the results

    def to_optuna(self, seed: int):
        import optuna

        # constant_liar: a running trial counts as a poor result, so parallel workers spread out.
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True,
                                          n_startup_trials=self.n_startup_trials)


class RandomSearch(Sampler):
    name: Literal["random"] = "random"

    def to_optuna(self, seed: int):
        import optuna

        return optuna.samplers.RandomSampler(seed=seed)


class NSGA2(Sampler):
    name: Literal["nsga2"] = "nsga2"
    population_size: int = Field(8, ge=2)    # trials per generation

    def to_optuna(self, seed: int):
        import optuna

        return optuna.samplers.NSGAIISampler(seed=seed, population_size=self.population_size)


class QMC(Sampler):
    name: Literal["qmc"] = "qmc"

    def to_optuna(self, seed: int):
        import optuna

        return optuna.samplers.QMCSampler(seed=seed, scramble=True)


# --- pruners --------------------------------------------------------------------------------------
class Pruner(_Kind):
    metric: str = EPOCH_METRIC   # the per-epoch metric reported to it

    @property
    def active(self) -> bool:
        """Whether it may stop a trial (every pruner but "none")."""
        return True

    def to_optuna(self):
        raise NotImplementedError


class NoPruner(Pruner):
    name: Literal["none"] = "none"

    @property
    def active(self) -> bool:
        return False

    def to_optuna(self):
        import optuna

        return optuna.pruners.NopPruner()


class _AgainstEarlierTrials(Pruner):
    """A pruner comparing a trial's epoch with the same epoch of the trials before it."""
    n_startup_trials: int = Field(3, ge=0)   # trials finished before it prunes any
    n_warmup_steps: int = Field(1, ge=0)     # epochs (counted from 0) a trial runs before it may be pruned


class Median(_AgainstEarlierTrials):
    name: Literal["median"] = "median"

    def to_optuna(self):
        import optuna

        return optuna.pruners.MedianPruner(n_startup_trials=self.n_startup_trials, n_warmup_steps=self.n_warmup_steps)


class Percentile(_AgainstEarlierTrials):
    name: Literal["percentile"] = "percentile"
    percentile: float = Field(25.0, ge=0, le=100)   # pruned below this percentile of the earlier trials

    def to_optuna(self):
        import optuna

        return optuna.pruners.PercentilePruner(self.percentile, n_startup_trials=self.n_startup_trials,
                                               n_warmup_steps=self.n_warmup_steps)


class SuccessiveHalving(Pruner):
    name: Literal["successive_halving"] = "successive_halving"

    def to_optuna(self):
        import optuna

        return optuna.pruners.SuccessiveHalvingPruner()


class Hyperband(Pruner):
    name: Literal["hyperband"] = "hyperband"

    def to_optuna(self):
        import optuna

        return optuna.pruners.HyperbandPruner()


class Threshold(Pruner):
    name: Literal["threshold"] = "threshold"
    lower: float | None = None   # pruned when the metric is below this ...
    upper: float | None = None   # ... or above this
    n_warmup_steps: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _bounded(self) -> "Threshold":
        if self.lower is None and self.upper is None:
            raise ValueError("needs lower or upper (or both)")
        return self

    def to_optuna(self):
        import optuna

        return optuna.pruners.ThresholdPruner(lower=self.lower, upper=self.upper, n_warmup_steps=self.n_warmup_steps)


SAMPLERS: dict[str, type[Sampler]] = {"tpe": TPE, "random": RandomSearch, "nsga2": NSGA2, "qmc": QMC}
PRUNERS: dict[str, type[Pruner]] = {"none": NoPruner, "median": Median, "percentile": Percentile,
                                    "successive_halving": SuccessiveHalving, "hyperband": Hyperband,
                                    "threshold": Threshold}


def _table(what: str, registry: dict[str, type[_Kind]]):
    """Reads a `[sampler]` or `[pruner]` table as its model (no `name`: the first kind listed); a
    mistake is a ValueError with one sentence, which the study file's reader names the file in."""
    def read(value: Any) -> _Kind:
        if isinstance(value, _Kind):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"[{what}] must be a table, like [{what}] name = \"{next(iter(registry))}\"")
        name = value.get("name", next(iter(registry)))
        if not isinstance(name, str) or name not in registry:
            raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(registry)}")
        model = registry[name]
        try:
            return model.model_validate({**value, "name": name})
        except ValidationError as err:
            raise ValueError(describe(err, f"[{what}] {name}", takes=model.model_fields,
                                      order=list(model.model_fields))) from None
    return read


AnySampler = Annotated[TPE | RandomSearch | NSGA2 | QMC, Field(discriminator="name"),
                       BeforeValidator(_table("sampler", SAMPLERS))]
AnyPruner = Annotated[NoPruner | Median | Percentile | SuccessiveHalving | Hyperband | Threshold,
                      Field(discriminator="name"), BeforeValidator(_table("pruner", PRUNERS))]
