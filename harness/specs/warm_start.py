"""`[[warm_start]]` tables of a study file: known recipes the study runs first, right after its
baseline, so the sampler starts from stacks that can win rather than from random draws
(studies/warm_starts.py queues them). Each names itself and sets some [space] parameters; the rest
are the [baseline]'s (without a [baseline], the sampler draws them):

    [[warm_start]]
    name = "tuned loop + bf16"
    params = { dtype = "bf16", lr_factor = "tuned", layout = { world_size = 2, threads = 0 } }

A compound choice is given as its table. `lr_factor = "tuned"` is the calibrated target's tuned
factor at the study's scale (studies/deciding/calibrated_target.py), or the baseline's own at a scale without
a calibration. Every mistake is one sentence when the file loads.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import UserError

TUNED = "tuned"            # lr_factor = "tuned": the tuned baseline's factor at the study's scale
TUNABLE = "lr_factor"      # the one parameter that takes it


class WarmStart(BaseModel):
    """One `[[warm_start]]` table."""
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)             # shown beside its trial in the report and --status
    params: dict[str, Any] = Field(min_length=1)  # [space] parameters it sets; the rest: the [baseline]'s


def check(spec) -> None:
    """Each warm start of a StudySpec (which imports this module) has a name of its own and sets
    searched parameters to values they admit."""
    seen: set[str] = set()
    for start in spec.warm_start:
        where = f"study file {spec.shown}: [[warm_start]] '{start.name}'"
        if start.name in seen:
            raise UserError(f"{where} is named twice; give each warm start a name of its own.")
        seen.add(start.name)
        for name, value in start.params.items():
            param = spec.space.get(name)
            if param is None:
                raise UserError(f"{where} sets '{name}', which [space] does not search; a warm start sets "
                                f"searched parameters only ({', '.join(spec.space)}).")
            if value == TUNED and name == TUNABLE:
                if spec.baseline is None:
                    raise UserError(f"{where} sets {name} = \"{TUNED}\", the tuned baseline's factor; the study "
                                    "has no [baseline] to tune.")
                continue
            if not param.admits(value):
                shown = ", ".join(map(repr, param.choices)) if param.choices else f"{param.low:g} to {param.high:g}"
                raise UserError(f"{where} sets {name} = {value!r}, which is not a value [space] allows for "
                                f"{name} ({shown})" + (f"; only {TUNABLE} takes \"{TUNED}\"" if value == TUNED else "")
                                + ".")
