"""The layering the code promises (docs/ARCHITECTURE.md), checked on the source: one door to
MLflow, a store that imports nothing above it, no private name imported across modules, and no
import cycle between the harness's modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("experiments/*.py")])


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool = False) -> list[tuple[str, list[str]]]:
    """(module, imported names) for each import in the file."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def test_only_the_store_reaches_mlflow_client():
    offenders = [str(p.relative_to(ROOT)) for p in SOURCES
                 if p != ROOT / "harness/store/tracking.py"
                 and any(m.startswith(("mlflow.tracking", "mlflow.entities")) or
                         (m == "mlflow" and {"MlflowClient", "tracking"} & set(names))
                         for m, names in _imports(p))]
    assert not offenders, offenders


@pytest.mark.parametrize("path", sorted(ROOT.glob("harness/store/*.py")), ids=lambda p: p.name)
def test_the_store_imports_nothing_above_it(path):
    allowed = ("harness.store", "harness.errors", "harness.fingerprint")
    above = [m for m, _ in _imports(path) if m.startswith(("harness", "experiments")) and not m.startswith(allowed)]
    assert not above, above


def test_no_private_name_is_imported_across_modules():
    crossing = [(str(p.relative_to(ROOT)), m, n) for p in SOURCES for m, names in _imports(p)
                if m.startswith(("harness", "experiments")) for n in names if n.startswith("_")]
    assert not crossing, crossing


def test_no_import_cycle_between_harness_modules():
    """Module-level imports only: an import inside a function runs when called, after both modules
    have loaded, and is how a registry names what it does not depend on."""
    known = {_module(p) for p in SOURCES}
    graph = {}
    for path in SOURCES:
        targets = set()
        for module, names in _imports(path, top_level_only=True):
            for candidate in [module, *(f"{module}.{n}" for n in names)]:
                if candidate in known and candidate != _module(path):
                    targets.add(candidate)
        graph[_module(path)] = targets

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return trail + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
        return None

    cycles = [c for c in (cycle_from(m) for m in graph) if c]
    # A package's __init__ re-exporting its own modules is not a cycle between layers.
    cycles = [c for c in cycles if not all(m.split(".")[:2] == c[0].split(".")[:2] for m in c)]
    assert not cycles, cycles[0]
