"""Each experiment as the harness reads it before anything runs, one module per experiment: its card
(the module's docstring: its question, fields, procedure and metrics), the field groups only it
reads, its config class and its `EXPERIMENT` descriptor, importing neither torch nor its run module.

Which experiments there are is read here from the modules' source (`found`): each module of this
package that declares `EXPERIMENT = Experiment(name="...", ...)` is the experiment of that name. So
a new experiment is found by its file alone, with no list to edit, and naming every experiment
imports none of them (the registry imports a descriptor when its experiment is asked for)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from harness.errors import UserError
from harness.folders import project_path


def found() -> dict[str, str]:
    """name -> descriptor module, by name, for each module of this package that declares an
    experiment. The package's folders are its __path__: a folder added to it is searched too (as
    tests/test_new_experiment.py adds one for an experiment of its own)."""
    return dict(_found(tuple(__path__)))


@functools.lru_cache(maxsize=8)
def _found(folders: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    files: dict[str, Path] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.py")):
            name = declared_name(path)
            if name is None:
                continue
            if name in files:
                raise UserError(f"two descriptors declare experiment '{name}': {project_path(files[name])} and "
                                f"{project_path(path)}; give one of them another name.")
            files[name] = path
    return tuple((name, f"{__name__}.{files[name].stem}") for name in sorted(files))


def declared_name(path: Path) -> str | None:
    """The name a descriptor's `EXPERIMENT = Experiment(name="...", ...)` gives, read from its source;
    None for a module that declares no experiment."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if not any(isinstance(target, ast.Name) and target.id == "EXPERIMENT" for target in targets):
            continue
        name = next((k.value for k in getattr(node.value, "keywords", []) if k.arg == "name"), None)
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value:
            return name.value
        raise UserError(f"{project_path(path)}: write the experiment's name as a string, EXPERIMENT = "
                        f"Experiment(name=\"...\", ...), so it is found without importing the file.")
    return None
