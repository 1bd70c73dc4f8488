"""Where a file named from user input may go: a sweep's or study's `name` becomes an MLflow
experiment, an artifacts folder and report files (`<name>.md`, `.csv`, `.png`), so it must be a plain
identifier, and every path built from it must stay inside the folder it was meant for (a shared
sweep file with `name = "../../x"` must not write anywhere the user can)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import UserError

# Letters, digits, '_' and '-', starting with a letter or digit: no separator, no '..' climb, no dot
# a file suffix would swallow, nothing a shell treats specially. Every shipped file's name is of this form.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def is_safe_name(name: str) -> bool:
    return bool(SAFE_NAME.fullmatch(name))


def check_name(name: str, what: str) -> str:
    """`name`, or one sentence saying why it cannot name files."""
    if not is_safe_name(name):
        raise UserError(f"{what} {name!r} is not a plain name; use letters, digits, '_' and '-' "
                        "(at most 100, starting with a letter or digit), since it names folders and files.")
    return name


def inside(folder: Path, *parts: str) -> Path:
    """folder/parts..., or one sentence when, resolved, it would leave `folder` (a '..', an absolute
    part, a symbolic link pointing out)."""
    base = Path(folder).resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise UserError(f"{'/'.join(parts)!r} would be written outside {base}; refusing.")
    return Path(folder).joinpath(*parts)
