"""`harness list [GROUP]`: what exists, by group. Without a group, one screen: every group under its
heading, names aligned, each description cut to the terminal's width and the config fields by name
only; `harness list sweeps` (or experiments, studies, models, datasets, fields) shows one group
whole, each description wrapped under its name. Nothing here imports torch, MLflow or Optuna."""

from __future__ import annotations

import shutil
import textwrap
from typing import Callable

from harness.errors import UserError
from harness.suggest import did_you_mean

WIDTH = 100          # when stdout is no terminal (a pipe, a file)
INDENT = "  "


def _experiments() -> list[tuple[str, str]]:
    import experiments

    return [(name, experiments.get(name).title) for name in experiments.names()]


def _sweeps() -> list[tuple[str, str]]:
    from harness.specs import sweep_spec

    return [(name, sweep_spec.load(name).title) for name in sweep_spec.available()]


def _studies() -> list[tuple[str, str]]:
    from harness.specs import study_spec

    return [(name, study_spec.load(name).title) for name in study_spec.available()]


def _models() -> list[tuple[str, str]]:
    from harness.fields.catalogue import MODELS

    return [(name, spec.description) for name, spec in MODELS.items()]


def _datasets() -> list[tuple[str, str]]:
    from harness.fields.catalogue import DATASETS, DOWNLOADS, IMAGE_FOLDER_DATASETS

    def what(name: str) -> str:
        if name in DOWNLOADS:
            return "torchvision's, downloaded into data_dir when online"
        if name in IMAGE_FOLDER_DATASETS:
            return "class folders data_dir/train and data_dir/test" + (" as 28x28 grey" if "grey28" in name else "")
        return {"digits": "scikit-learn's 8x8 digits, offline (smoke scales)",
                "synthetic": "random images of the model's input shape, made in memory"}.get(name, "")

    return [(name, what(name)) for name in DATASETS]


def _fields() -> list[tuple[str, str]]:
    import experiments

    return [(name, f"default {default}. {text}") for name, default, text in experiments.field_help()]


# group -> (heading, how its names are used, its rows)
GROUPS: dict[str, tuple[str, str, Callable[[], list[tuple[str, str]]]]] = {
    "experiments": ("experiments", "harness run NAME", _experiments),
    "sweeps": ("sweeps", "harness sweep NAME --scale SCALE, or make sweep-NAME", _sweeps),
    "studies": ("studies", "harness study NAME --scale SCALE, or make study-NAME with - for _", _studies),
    "models": ("models", "--set model=NAME", _models),
    "datasets": ("datasets", "--set dataset=NAME, or make DATASET=NAME", _datasets),
    "fields": ("config fields", "--set KEY=VALUE, or make SET=\"KEY=VALUE ...\"", _fields),
}


def check_group(group: str | None) -> None:
    if group is not None and group not in GROUPS:
        raise UserError(f"harness list has no group '{group}'; {did_you_mean(group, GROUPS)}choose one of "
                        f"{', '.join(GROUPS)}, or none for all of them.")


def render(group: str | None = None, width: int | None = None) -> list[str]:
    """The lines of `harness list` (every group, one screen) or `harness list GROUP` (that group whole)."""
    check_group(group)
    width = width or terminal_width()
    if group is not None:
        heading, usage, rows = GROUPS[group]
        return [f"{heading} ({usage}):", *_wrapped(rows(), width)]
    lines = []
    for name, (heading, usage, rows) in GROUPS.items():
        found = rows()
        if name == "fields":   # by name only: their meanings are a page of their own
            lines += [f"{heading} ({usage}):", *_flowing([n for n, _ in found], width)]
        else:
            lines += [f"{heading} ({usage}):", *_cut(found, width)]
    return [*lines, f"harness list GROUP shows one group whole: {', '.join(GROUPS)}."]


def terminal_width() -> int:
    return shutil.get_terminal_size((WIDTH, 24)).columns


def _name_width(rows: list[tuple[str, str]]) -> int:
    return max((len(name) for name, _ in rows), default=0) + 2


def _cut(rows: list[tuple[str, str]], width: int) -> list[str]:
    """One line a row: the name, then as much of the description as the width holds."""
    column = _name_width(rows)
    room = max(width - len(INDENT) - column, 20)
    return [f"{INDENT}{name:<{column}}{text if len(text) <= room else text[:room - 1].rstrip() + '…'}"
            for name, text in rows]


def _wrapped(rows: list[tuple[str, str]], width: int) -> list[str]:
    """The whole description of each row, wrapped under itself beside the name."""
    column = _name_width(rows)
    hang = " " * (len(INDENT) + column)
    lines = []
    for name, text in rows:
        lines += textwrap.wrap(text, width=max(width, len(hang) + 20), initial_indent=f"{INDENT}{name:<{column}}",
                               subsequent_indent=hang) or [f"{INDENT}{name}"]
    return lines


def _flowing(names: list[str], width: int) -> list[str]:
    """Names one after another, as many to a line as the width holds (columns took twice the lines)."""
    return textwrap.wrap(", ".join(names), width=width, initial_indent=INDENT, subsequent_indent=INDENT,
                         break_on_hyphens=False)
