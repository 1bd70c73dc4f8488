"""A study's space fitted to the host it runs on.

At study start the harness asks whether this CPU computes each dtype the study can train in itself
(precision.native_support). A dtype it emulates (torch converts through fp32, many times slower than
fp32: docs/MEASUREMENT.md#emulated-dtypes) leaves the space, plain choice or compound one, so the
sampler spends no trial on a recipe that cannot win here; one line says so, and the study records it.

The host's class (which of the study's dtypes it computes itself) is part of the study's identity:
times from a host that computes bf16 and one that emulates it do not mix, so a study resumed on a
host of another class is refused, before any trial. The filtered space is what Optuna samples from
and what the space digest (study_storage) is taken over, so it is the study's space on that class.

`--keep-emulated` keeps every dtype (a study of what emulation costs). A dtype the [baseline] trains
in stays whatever the host: the baseline is a fixed trial, Optuna must find its value among the
choices, and the emulated-dtype line (cli/emulated_dtype.py) already says what it costs. Only CPU
studies are fitted: a GPU's dtypes are decided by the precision module at each cell.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import UserError
from harness.store import redact

if TYPE_CHECKING:
    from harness.specs.study_spec import Param, StudySpec

HOST_ATTR = "harness.host"   # study user attribute: the host class it runs on, and what its space left out
DTYPE = "dtype"
ORDER = ("fp32", "bf16", "fp16")   # how dtypes are listed


@dataclass(frozen=True)
class HostClass:
    """Which of a study's dtypes this host computes itself, and what the study's space left out."""
    native: list[str]
    emulated: list[str]
    cpu: str                 # the CPU's model, for a reader (two models of one class compare equal)
    left_out: list[str]      # emulated dtypes taken out of the space (none with --keep-emulated)

    def kept(self) -> list[str]:
        return [d for d in self.emulated if d not in self.left_out]


def fit(spec: "StudySpec", scale: str, overrides: dict[str, Any], keep_emulated: bool) -> "StudySpec":
    """The spec with its space fitted to this host (the same spec when the study trains on a GPU or
    in fp32 only); a dtype choice left with no option is one sentence."""
    import torch

    from experiments import make_config
    from harness.machine.fingerprint import cpu_model
    from harness.training.precision import native_support

    config = make_config(spec.fixed_for_checks(scale, overrides))
    fixed = getattr(config, DTYPE, None) or "fp32"
    dtypes = _ordered({"fp32", fixed, *_space_dtypes(spec), *_baseline_dtypes(spec)})
    if getattr(config, "device", "cpu") != "cpu" or dtypes == ["fp32"]:
        return spec
    native = [d for d in dtypes if native_support(torch.device("cpu"), d)]
    emulated = [d for d in dtypes if d not in native]
    # a fixed or baseline dtype is not the sampler's to drop: the emulated-dtype line tells its cost
    dropped = set() if keep_emulated else set(emulated) & (_space_dtypes(spec) - _baseline_dtypes(spec))
    space = {name: _without(spec, param, dropped) for name, param in spec.space.items()}
    fitted = spec.model_copy(update={"space": space})
    fitted._host = HostClass(native, emulated, cpu_model(), _ordered(dropped))
    return fitted


def host_of(spec: "StudySpec") -> HostClass | None:
    """The host class a fitted spec was fitted to (None: not fitted)."""
    return getattr(spec, "_host", None)


def lines(spec: "StudySpec") -> list[str]:
    """What the fit did to the space, one line per emulated dtype it can choose."""
    host = host_of(spec)
    if host is None:
        return []
    said = [f"{d} left out: this CPU emulates it; --keep-emulated keeps it" for d in host.left_out]
    for dtype in host.kept():
        if dtype in _space_dtypes(spec):
            why = "the baseline trains in it" if dtype in _baseline_dtypes(spec) else "--keep-emulated"
            said.append(f"{dtype} kept although this CPU emulates it ({why})")
    return said


def worker_args(spec: "StudySpec") -> list[str]:
    """The flag a launcher's worker needs to fit the space as this process did: none left out of a
    host that emulates one of the study's dtypes (with the flag or without, the same fit)."""
    host = host_of(spec)
    return ["--keep-emulated"] if host is not None and host.emulated and not host.left_out else []


def check_study(study, spec: "StudySpec", study_name: str, url: str, space_changed: bool) -> None:
    """Refuse a study made on a host of another class, or with the other choice of --keep-emulated;
    a study from before the fit, whose space (`space_changed`: its recorded digest is another) had
    the dtype now left out, is told how to resume."""
    host = host_of(spec)
    had = study.user_attrs.get(HOST_ATTR)
    where = f"study '{study_name}' in {redact(url)}"
    if host is None:
        return
    if had is None:
        if host.left_out and space_changed:
            raise UserError(f"{where} was made before emulated dtypes left a study's space, with "
                            f"{_words(host.left_out)} in its space; resume it with --keep-emulated, or give it "
                            "another --storage.")
        return
    if (had["native"], had["emulated"]) != (host.native, host.emulated):
        raise UserError(f"{where} ran on a host that {_class(had['native'], had['emulated'])} ({had['cpu']}) and "
                        f"this one {_class(host.native, host.emulated)}: times from two classes of host do not mix, "
                        "so resume it on a host of its class, or give it another --storage.")
    if had["left_out"] != host.left_out:
        kept = bool(had["emulated"]) and not had["left_out"]
        raise UserError(f"{where} was made {'with' if kept else 'without'} --keep-emulated "
                        f"({_words(host.left_out or had['left_out'])} {'in' if kept else 'out of'} its space); "
                        f"run it {'with' if kept else 'without'} --keep-emulated, or give it another --storage.")


def record(study, spec: "StudySpec") -> None:
    """Keep the host class with the study (once its space is known to be the study's)."""
    host = host_of(spec)
    if host is not None and HOST_ATTR not in study.user_attrs:
        study.set_user_attr(HOST_ATTR, asdict(host))


def report_lines(study) -> list[str]:
    """The report's line on the space of the study's host, when that host emulates one of its dtypes."""
    had = study.user_attrs.get(HOST_ATTR)
    if not had or not had.get("emulated"):
        return []
    kept = [d for d in had["emulated"] if d not in had["left_out"]]
    said = [f"{_words(had['left_out'])} left out (emulated)"] if had["left_out"] else []
    said += [f"{_words(kept)} kept although emulated"] if kept else []
    return [f"space on this host: {'; '.join(said)} ({had['cpu']})"]


def _space_dtypes(spec: "StudySpec") -> set[str]:
    """The dtypes the space's choices train in (a plain `dtype` choice or a compound one)."""
    return {d for param in spec.space.values() if DTYPE in param.field_names()
            for choice in param.choices or [] if (d := _dtype_of(param, choice))}


def _ordered(dtypes) -> list[str]:
    return sorted(dtypes, key=lambda d: ORDER.index(d) if d in ORDER else len(ORDER))


def _baseline_dtypes(spec: "StudySpec") -> set[str]:
    if spec.baseline is None:
        return set()
    return {d for name, value in spec.baseline.params.items() if name in spec.space
            and (d := _dtype_of(spec.space[name], value))}


def _dtype_of(param: "Param", value: Any) -> str | None:
    """The dtype one value of a parameter trains in (None: it sets none)."""
    return param.fields(value).get(DTYPE) if param.type == "categorical" else None


def _without(spec: "StudySpec", param: "Param", dropped: set[str]) -> "Param":
    """The parameter without the choices that train in a dropped dtype."""
    if not dropped or DTYPE not in param.field_names():
        return param
    choices = [c for c in param.choices if _dtype_of(param, c) not in dropped]
    if not choices:
        raise UserError(f"study file {spec.shown}: every choice of '{param.name}' trains in "
                        f"{_words(_ordered({_dtype_of(param, c) for c in param.choices}))}, which this CPU "
                        "emulates; add an fp32 choice, or pass "
                        "--keep-emulated to keep them.")
    return param.model_copy(update={"choices": choices})


def _class(native: list[str], emulated: list[str]) -> str:
    return f"computes {_words(native)} itself" + (f" and emulates {_words(emulated)}" if emulated else "")


def _words(dtypes: list[str]) -> str:
    return " and ".join(dtypes)
