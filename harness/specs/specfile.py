"""What sweep and study files share: reading a TOML file into a typed model (every wrong type,
unknown key or unreadable file is one sentence naming the file and the key), the scales, and the
fixed settings of a scale (base, then the scale's own values, then the user's --set)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.fields.config import is_finite
from harness import errors
from harness.errors import UserError, full_stop
from harness.store.paths import is_safe_name
from harness.folders import project_path
from harness.suggest import did_you_mean, shown_path

SCALES = ("smoke", "quick", "full")   # every file has these; a file may add its own (amp's `cpu`)
LAST_SCALE = "last"   # not a scale: `--scale last` asks for the last run's (harness/cli/last_scale.py)

Spec = TypeVar("Spec", bound="SpecFile")


class SpecFile(BaseModel):
    """The keys a sweep file and a study file both have."""
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    kind: ClassVar[str] = "spec"   # "sweep" or "study", for messages
    derived: ClassVar[tuple[str, ...]] = ("path",)   # fields the reader fills in, never a file's keys

    name: str = Field(min_length=1)
    title: str = ""
    source: str = ""
    experiment: str
    base: dict[str, Any] = {}
    scales: dict[str, dict[str, Any]] = Field({}, validate_default=True)
    path: Path | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        # The name becomes an MLflow experiment, an artifacts folder and report file names.
        if not is_safe_name(name):
            raise ValueError("must be a plain name of letters, digits, '_' and '-' (at most 100, starting with "
                             "a letter or digit), since it names folders and files")
        return name

    @field_validator("scales")
    @classmethod
    def _every_scale(cls, scales: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for scale in scales:  # a scale is part of a study's name, and so of its report files' names
            if not is_safe_name(scale):
                raise ValueError(f"scale {scale!r} must be a plain name of letters, digits, '_' and '-'")
            if scale == LAST_SCALE:
                raise ValueError(f"scale '{LAST_SCALE}' is the command line's word for the last run's scale; "
                                 "name the scale otherwise")
        return {s: {} for s in SCALES} | scales

    @classmethod
    def file_keys(cls) -> list[str]:
        """The keys a file may hold: the model's fields less those the reader fills in itself."""
        return [k for k in cls.model_fields if k not in cls.derived]

    @property
    def shown(self) -> str:
        """The file as messages name it: from the project's root when it is one of the project's."""
        return project_path(self.path)

    def scale_values(self, scale: str) -> dict[str, Any]:
        """The scale's own settings (its `grid` table, if any, left out)."""
        if scale not in self.scales:
            raise UserError(f"unknown scale '{scale}'; {did_you_mean(scale, self.scales)}choose one of "
                            f"{', '.join(self.scales)}.")
        return {k: v for k, v in self.scales[scale].items() if k != "grid"}

    def fixed(self, scale: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """Settings every cell (or trial) of this scale shares, overrides last."""
        return {"experiment": self.experiment, **self.base, **self.scale_values(scale), **(overrides or {})}

    def check_fields(self) -> None:
        """Every key of base and scales is a config field its experiment reads."""
        for section in (self.base, *(self.scale_values(s) for s in self.scales)):
            self.check_read(section)  # an unknown key too, named with the file

    def check_read(self, keys) -> None:
        """Every key is a field the file's experiment reads (one it ignores would change nothing
        but the cell id)."""
        import experiments

        experiments.check_reads(self.experiment, keys, where=f"{self.kind} file {self.shown}")



def read(path: Path, model: type[Spec]) -> Spec:
    """The file as `model`, or one sentence naming the file and what is wrong with it."""
    return build(read_toml(path, model.kind), path, model)


def read_toml(path: Path, kind: str) -> dict[str, Any]:
    """The file's TOML as a dict, or one sentence naming the file: unreadable, not UTF-8, not TOML,
    or holding an infinite number."""
    shown = project_path(path)
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{kind} file {shown} is not UTF-8 text (byte {err.start}); save it as UTF-8.") from None
    except OSError as err:
        raise UserError(f"cannot read the {kind} file {shown}: {err.strerror}.") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{kind} file {shown} is not valid TOML: {err}.") from None
    for key, value in _numbers(raw):
        if not is_finite(value):  # TOML has inf and nan; no setting, range or published figure is either
            raise UserError(f"{kind} file {shown}: key '{key}' must be a finite number (got {value}).")
    return raw


def build(raw: dict[str, Any], path: Path, model: type[Spec]) -> Spec:
    """The file's keys (`raw`, as read from `path`) as `model`, or one sentence naming the file."""
    kind, shown = model.kind, project_path(path)
    try:
        return model(**raw, path=path)
    except ValidationError as err:
        keys = model.file_keys()   # an unknown key's "did you mean", and the order mistakes are told in
        raise UserError(full_stop(errors.describe(err, f"{kind} file {shown}", takes=keys, order=keys))) from None
    except TypeError as err:  # a top-level key named like a keyword argument
        raise UserError(f"{kind} file {shown}: {err}.") from None


def _numbers(node: Any, key: str = ""):
    """(dotted key, value) for every float in the file, however deeply nested."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _numbers(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _numbers(value, f"{key}[{index}]")
    elif isinstance(node, float):
        yield key, node


def find(name_or_path: str, *, folder: Path, prefix: str, kind: str, available: list[str]) -> Path:
    """A name in the folder (sweeps/; with the prefix studies carry) or the path of a .toml file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        return path
    candidates = [folder / f"{prefix}{name_or_path}.toml", folder / f"{name_or_path}.toml"]
    for candidate in candidates:
        if candidate.is_file() and candidate.stem.startswith(prefix) and \
                (prefix or not candidate.stem.startswith("study_")):
            return candidate
    if path.suffix == ".toml" or len(path.parts) > 1:  # meant as a path: say where it was looked for
        raise UserError(f"no {kind} file at {shown_path(path)}; give the path of a {kind} .toml file "
                        f"or one of {', '.join(available)}.")
    short = [a.removeprefix(prefix) for a in available]
    raise UserError(f"unknown {kind} '{name_or_path}'; {did_you_mean(name_or_path.removeprefix(prefix), short)}"
                    f"choose one of {', '.join(available)} or give the path of a {kind} .toml file.")
