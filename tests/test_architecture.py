"""The layering the code promises (docs/ARCHITECTURE.md), checked on the source: one door to
MLflow, a store that imports nothing above it, a torch-free half (harness/fields) from which no
import of torch can be reached, no private name imported across modules, every module on a floor
of LAYERS, no two modules of the harness of one name, neither an import cycle nor an import up the
floors or up the rooms of a floor (ROOMS), and no class longer than a reader takes in at once.

Imports are read at any depth: one inside a function (or a method, an `if`, a `try`, a
TYPE_CHECKING block) counts as much as one at the top of the file. It runs later, but it makes
the module depend on the other all the same, and a cycle through it is a cycle."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("experiments/**/*.py")])

# The floors, bottom first: a module may import modules of its own floor and of the floors below,
# never of one above. "a.b" names that module; "a.b.*" names the package a.b and every module in
# it. A module's floor is that of its own name if listed, else of its closest package.
LAYERS = [
    ("constants", ["harness", "harness.folders", "harness.errors", "harness.suggest", "harness.signals",
                   "harness.ui_links"]),
    ("the machine", ["harness.machine.*"]),
    ("the store", ["harness.store.*"]),
    ("the torch-free half: a cell's config, its field groups, the catalogue, the data folders", ["harness.fields.*"]),
    ("the training half", ["harness.training.*"]),
    ("ranks", ["harness.distributed.*"]),
    ("the experiments", ["experiments.*"]),
    ("what sweep and study files hold, and the command that ran one", ["harness.specs.*", "harness.rerun"]),
    ("the report: read back from the store, never running a cell", ["harness.report.*"]),
    ("one cell and where cells run", ["harness.cells", "harness.launchers.*"]),
    ("one invocation in its three modes: here, as a launcher, as a worker", ["harness.invocation"]),
    ("the engines", ["harness.sweeps.*", "harness.studies.*"]),
    ("the command line", ["harness.cli.*", "harness.__main__"]),
]

# What the torch-free half (harness/fields) never imports, nor anything of the harness it reaches:
# torch and what loads it, numpy beside it, and the other imports of seconds, MLflow and Optuna. The
# command line answers a mistake from that half before any of them is imported.
HEAVY = ("torch", "torchvision", "torch_pruning", "nni", "numpy", "mlflow", "optuna")

# Rooms inside one floor's folder, bottom first, checked as the floors are: a module of a room may
# import its own room and those below, never one above (modules outside the folder are no room's).
# The studies run trials in harness/studies and decide in harness/studies/deciding, which reads
# what the trials left (their storage, the target file, the fork server); nothing that runs a trial
# imports the half that decides.
ROOMS = [
    ("running trials", ["harness.studies.*"]),
    ("deciding: target, race, verification, cards", ["harness.studies.deciding.*"]),
]

# A class a reader takes in at one sitting. The classes longer than that from before the rule, each
# held at its length (lines, `class` to its last line) until it is split: one may shrink, not grow.
MAX_CLASS_LINES = 120
LONG_CLASSES = {
    "harness/store/tracking.py:Store": 409,
    "harness/sweeps/sweep_engine.py:_Sweep": 202,
    "harness/specs/study_spec.py:StudySpec": 140,
    "harness/store/claims.py:Claims": 121,
}


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for each absolute import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


# --- the import graph, at any depth ----------------------------------------------------------------
Graph = dict[str, dict[str, str]]   # module -> {module it imports: "file:line" of the first such import}


def import_graph(root: Path, sources: list[Path]) -> Graph:
    """Every import between the modules of `sources` (files under `root`), wherever it stands in
    the file. `from package import module` is an import of that module (the package's __init__
    runs first, but that is how packages load, not a dependency); `from package import name` is
    an import of the package."""
    known = {_module(p, root) for p in sources}
    graph: Graph = {}
    for path in sources:
        me = _module(path, root)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        edges = graph.setdefault(me, {})
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [_closest_known(alias.name, known) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the file's package, one level up per dot after the first
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else _closest_known(base, known)
                           for alias in node.names]
            else:
                continue
            for target in targets:
                if target and target != me:
                    edges.setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
    return graph


def _closest_known(name: str, known: set[str]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first, in name order, so it is repeatable)."""
    state: dict[str, str] = {}   # "open" while on the current path, "done" once fully explored

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(graph.get(module, {})):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[module] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def cycle_text(graph: Graph, cycle: list[str]) -> str:
    """'a -> b (a.py:3) -> a (b.py:7)': each step with the import that makes it."""
    return cycle[0] + "".join(f" -> {b} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def floor_of(module: str, layers=LAYERS) -> int | None:
    best = None   # (length of the entry that names it, floor)
    for floor, (_, names) in enumerate(layers):
        for name in names:
            package = name.removesuffix(".*")
            if module == name or (name.endswith(".*") and (module == package or module.startswith(package + "."))):
                exact = module == name
                rank = (exact, len(package))
                if best is None or rank > best[0]:
                    best = (rank, floor)
    return None if best is None else best[1]


def names_used_twice(root: Path, sources: list[Path]) -> dict[str, list[str]]:
    """Each module name (the last part: a file's stem, a package's folder) that two or more of
    `sources` share, with their files. Two modules named alike read alike at every import
    (`from harness.sweeps import spec`, `from harness.studies import spec`), so a file needing both
    renames one of them on the spot, and a reader has to look up which is which."""
    files: dict[str, list[str]] = {}
    for path in sources:
        if path.name == "__main__.py":   # every package may have one; it is run, never imported by name
            continue
        name = path.parent.name if path.name == "__init__.py" else path.stem
        files.setdefault(name, []).append(str(path.relative_to(root)))
    return {name: paths for name, paths in sorted(files.items()) if len(paths) > 1}


def heavy_imports(root: Path, sources: list[Path], package: str, heavy=HEAVY) -> list[str]:
    """Each import of a `heavy` package, at any depth, in a module of `package` or in any module of
    `sources` one of them reaches through imports at any depth (and the __init__ of every package
    above such a module: importing it runs them), as 'file:line: imports torch (a -> b -> c)', the
    way from `package` to that file."""
    graph = import_graph(root, sources)
    files = {_module(p, root): p for p in sources}
    way = {m: [m] for m in sorted(files) if m == package or m.startswith(package + ".")}
    todo = list(way)
    while todo:
        module = todo.pop(0)
        parts = module.split(".")
        above = [".".join(parts[:end]) for end in range(1, len(parts))]
        for target in [*above, *sorted(graph.get(module, {}))]:
            if target in files and target not in way:
                way[target] = way[module] + [target]
                todo.append(target)
    found = []
    for module, steps in sorted(way.items()):
        path = files[module]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: imports {name} ({' -> '.join(steps)})"
                      for name in names if name.partition(".")[0] in heavy]
    return found


def arrows_up(graph: Graph, layers=LAYERS, kind: str = "floor") -> list[str]:
    """Each import of a module on a higher floor (or room: `kind`), as one line naming the file and line."""
    found = []
    for module, edges in sorted(graph.items()):
        mine = floor_of(module, layers)
        for target, where in sorted(edges.items()):
            theirs = floor_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{where}: {module} ({kind} '{layers[mine][0]}') imports {target} "
                             f"({kind} '{layers[theirs][0]}', above it)")
    return found


def class_lengths(root: Path, sources: list[Path]) -> dict[str, int]:
    """'path:Class' -> its lines, from `class` to its last line (a nested class by its own name)."""
    lengths: dict[str, int] = {}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                key = f"{path.relative_to(root).as_posix()}:{node.name}"
                lengths[key] = max(lengths.get(key, 0), node.end_lineno - node.lineno + 1)
    return lengths


def too_long(lengths: dict[str, int], known: dict[str, int], limit: int = MAX_CLASS_LINES) -> list[str]:
    """Each class over `limit` lines and longer than `known` holds it at, and each of `known` now
    within the limit or gone (to take off the list), one line each."""
    over = [f"{name}: {n} lines, over {limit}" + (f" and longer than the {known[name]} it is held at"
                                                  if name in known else "")
            for name, n in sorted(lengths.items()) if n > max(limit, known.get(name, 0))]
    done = [f"{name}: {lengths[name]} lines now; take it off LONG_CLASSES" if name in lengths else
            f"{name}: no such class now; take it off LONG_CLASSES"
            for name in sorted(known) if lengths.get(name, 0) <= limit]
    return over + done


# --- the checks on this project ----------------------------------------------------------------------
def test_only_the_store_reaches_mlflow_client():
    offenders = [str(p.relative_to(ROOT)) for p in SOURCES
                 if p != ROOT / "harness/store/tracking.py"
                 and any(m.startswith(("mlflow.tracking", "mlflow.entities")) or
                         (m == "mlflow" and {"MlflowClient", "tracking"} & set(names))
                         for m, names in _imports(p))]
    assert not offenders, offenders


@pytest.mark.parametrize("path", sorted(ROOT.glob("harness/store/*.py")), ids=lambda p: p.name)
def test_the_store_imports_nothing_above_it(path):
    allowed = ("harness.store", "harness.errors", "harness.machine", "harness.folders",
               "harness.signals")
    above = [m for m, _ in _imports(path) if m.startswith(("harness", "experiments")) and not m.startswith(allowed)]
    assert not above, above


def test_no_private_name_is_imported_across_modules():
    crossing = [(str(p.relative_to(ROOT)), m, n) for p in SOURCES for m, names in _imports(p)
                if m.startswith(("harness", "experiments")) for n in names if n.startswith("_")]
    assert not crossing, crossing


def test_every_module_is_on_a_floor():
    unplaced = [str(p.relative_to(ROOT)) for p in SOURCES if floor_of(_module(p)) is None]
    assert not unplaced, f"give these modules a floor in LAYERS: {unplaced}"


@pytest.fixture(scope="module")
def project_graph() -> Graph:
    """import_graph(ROOT, SOURCES), built once for the tests that only read it."""
    return import_graph(ROOT, SOURCES)


def test_the_bottom_floor_imports_nothing_of_the_harness(project_graph):
    graph = project_graph
    bottom = [m for m in graph if floor_of(m) == 0]
    reaching = {m: sorted(graph[m]) for m in bottom if graph[m]}
    assert not reaching, reaching


def test_no_import_cycle_at_any_depth(project_graph):
    graph = project_graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + cycle_text(graph, cycle)


def test_no_import_goes_up_the_floors(project_graph):
    up = arrows_up(project_graph)
    assert not up, "\n".join(up)


def test_the_torch_free_half_imports_no_torch_at_any_depth():
    """Nothing in harness/fields imports torch (nor numpy, MLflow, Optuna), inside a function either,
    and no module of the harness it imports does, at any depth: a mistake in a user's values is
    answered from it before torch loads, and a late import there would load it the first time some
    check ran."""
    modules = {_module(p) for p in SOURCES}
    assert {"harness.fields.config", "harness.fields.field_groups", "harness.fields.catalogue",
            "harness.fields.data_folders"} <= modules
    found = heavy_imports(ROOT, SOURCES, "harness.fields")
    assert not found, "\n".join(found)
def test_no_import_goes_up_the_rooms_of_a_floor(project_graph):
    up = arrows_up(project_graph, ROOMS, kind="room")
    assert not up, "\n".join(up)


def test_every_room_holds_a_module():
    """A room no module is in checks nothing: its folder was moved or renamed."""
    modules = [_module(p) for p in SOURCES]
    empty = [label for room, (label, _) in enumerate(ROOMS) if not any(floor_of(m, ROOMS) == room for m in modules)]
    assert not empty, f"rooms without a module: {empty}"


def test_no_class_is_longer_than_a_reader_takes_in_at_once():
    found = too_long(class_lengths(ROOT, SOURCES), LONG_CLASSES)
    assert not found, f"split a class into collaborators of {MAX_CLASS_LINES} lines at most:\n" + "\n".join(found)


def test_no_two_modules_of_the_harness_share_a_name():
    twice = names_used_twice(ROOT, sorted(ROOT.glob("harness/**/*.py")))
    assert not twice, "give each module a name of its own across harness/: " + "; ".join(
        f"{name}: {', '.join(paths)}" for name, paths in twice.items())


# --- the checker itself, on a package made for it -----------------------------------------------------
@pytest.mark.parametrize("late_import", [
    "def helper():\n    from pkg.high import VALUE\n    return VALUE\n",
    "class Helper:\n    def value(self):\n        if True:\n"
    "            import pkg.high\n            return pkg.high.VALUE\n",
    "def helper():\n    try:\n        from pkg import high\n    except ImportError:\n        return None\n",
    "def helper():\n    from . import high\n",
], ids=["from-in-function", "import-in-method", "submodule-in-try", "relative"])
def test_a_function_local_cycle_fails_the_check(tmp_path, late_import):
    """pkg.high imports pkg.low at the top; pkg.low imports pkg.high back only inside a function.
    Module-level reading misses that; this checker finds the cycle and the arrow up, and names the
    file and line of the late import."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from pkg import low\n\nVALUE = 1\n")
    (package / "low.py").write_text("def helper():\n    return 1\n")
    sources = sorted(package.glob("*.py"))
    layers = [("low", ["pkg", "pkg.low"]), ("high", ["pkg.high"])]
    clean = import_graph(tmp_path, sources)
    assert find_cycle(clean) is None and not arrows_up(clean, layers)

    (package / "low.py").write_text(late_import)
    graph = import_graph(tmp_path, sources)
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"pkg.high", "pkg.low"}
    text = cycle_text(graph, cycle)
    late_line = next(i for i, line in enumerate(late_import.splitlines(), 1) if "import" in line)
    assert f"{Path('pkg', 'low.py')}:{late_line}" in text and f"{Path('pkg', 'high.py')}:1" in text
    (up,) = arrows_up(graph, layers)
    assert up.startswith(f"{Path('pkg', 'low.py')}:{late_line}: pkg.low (floor 'low') imports pkg.high")


def test_a_torch_import_modules_away_fails_the_torch_free_check(tmp_path):
    """pkg.free.names imports pkg.middle, which imports pkg.heavy only inside a function, and
    pkg.heavy imports torch inside a function of its own: the check names that line and the way to
    it. A package's __init__ above a module reached counts (importing the module runs it); a module
    that nothing reached imports is none of the check's business."""
    package = tmp_path / "pkg"
    (package / "free").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "free" / "__init__.py").write_text("")
    (package / "free" / "names.py").write_text("from pkg import middle\n")
    (package / "middle.py").write_text("def helper():\n    from pkg.heavy import count\n    return count()\n")
    (package / "heavy.py").write_text("def count():\n    import torch\n    return torch.cuda.device_count()\n")
    (package / "apart.py").write_text("import torch\n")
    sources = sorted(tmp_path.glob("pkg/**/*.py"))
    assert heavy_imports(tmp_path, sources, "pkg.free") == [
        f"{Path('pkg', 'heavy.py')}:2: imports torch (pkg.free.names -> pkg.middle -> pkg.heavy)"]

    (package / "heavy.py").write_text("def count():\n    return 0\n")
    (package / "__init__.py").write_text("import numpy.linalg\n")
    assert heavy_imports(tmp_path, sources, "pkg.free") == [
        f"{Path('pkg', '__init__.py')}:1: imports numpy.linalg (pkg.free -> pkg)"]

    (package / "__init__.py").write_text("")
    assert heavy_imports(tmp_path, sources, "pkg.free") == []


def test_a_module_is_on_its_own_floor_before_its_packages():
    layers = [("engines", ["h.sweeps.*"]), ("report", ["h.report.*"]), ("above both", ["h.sweeps.decide"])]
    assert floor_of("h.sweeps", layers) == floor_of("h.sweeps.sweep_engine", layers) == 0
    assert floor_of("h.sweeps.decide", layers) == 2
    assert floor_of("h.sweepstakes", layers) is None and floor_of("h", layers) is None


def test_a_room_is_checked_as_a_floor_inside_its_folder():
    """The deciding room importing the running room is an arrow down, an import from outside the
    folder is no room's, and the running room importing the deciding room is the arrow up."""
    rooms = [("running", ["h.studies.*"]), ("deciding", ["h.studies.deciding.*"])]
    graph = {"h.studies.trial_loop": {"h.studies.isolation": "h/studies/trial_loop.py:3"},
             "h.studies.deciding.verify": {"h.studies.isolation": "h/studies/deciding/verify.py:5"},
             "h.cli.commands": {"h.studies.deciding.verify": "h/cli/commands.py:7"}}
    assert arrows_up(graph, rooms, kind="room") == []
    graph["h.studies.warm_starts"] = {"h.studies.deciding.calibrated_target": "h/studies/warm_starts.py:9"}
    assert arrows_up(graph, rooms, kind="room") == [
        "h/studies/warm_starts.py:9: h.studies.warm_starts (room 'running') imports "
        "h.studies.deciding.calibrated_target (room 'deciding', above it)"]


def test_a_long_class_is_found_and_a_listed_one_may_only_shrink(tmp_path):
    (tmp_path / "m.py").write_text("class Short:\n    a = 1\n\n\nclass Long:\n" + "    a = 1\n" * 5
                                   + "\n    class Inner:\n        b = 2\n")
    lengths = class_lengths(tmp_path, [tmp_path / "m.py"])
    assert lengths == {"m.py:Short": 2, "m.py:Long": 9, "m.py:Inner": 2}
    assert too_long(lengths, {}, limit=5) == ["m.py:Long: 9 lines, over 5"]
    assert too_long(lengths, {"m.py:Long": 9}, limit=5) == []
    assert too_long(lengths, {"m.py:Long": 8}, limit=5) == [
        "m.py:Long: 9 lines, over 5 and longer than the 8 it is held at"]
    assert too_long(lengths, {"m.py:Long": 9, "m.py:Short": 3, "m.py:Gone": 7}, limit=5) == [
        "m.py:Gone: no such class now; take it off LONG_CLASSES", "m.py:Short: 2 lines now; take it off LONG_CLASSES"]


def test_a_name_used_twice_is_found_for_files_and_packages_alike(tmp_path):
    """The shape the harness had before its modules got names of their own: a spec and an engine
    module in both the sweeps and the studies package, and a report module of the studies beside the
    report package. Each clash is found; the __init__.py and __main__.py every package may have are
    none."""
    layout = {"": ["__init__", "__main__"], "cli": ["__init__", "__main__"], "report": ["__init__", "tables"],
              "studies": ["__init__", "engine", "report", "spec"], "sweeps": ["__init__", "decide", "engine", "spec"]}
    for package, modules in layout.items():
        for module in modules:
            (tmp_path / "h" / package).mkdir(parents=True, exist_ok=True)
            (tmp_path / "h" / package / f"{module}.py").write_text("")

    def found() -> dict[str, list[str]]:
        twice = names_used_twice(tmp_path, sorted(tmp_path.glob("h/**/*.py")))
        return {name: sorted(paths) for name, paths in twice.items()}

    def at(package: str, module: str) -> str:
        return str(Path("h", package, f"{module}.py"))

    assert found() == {"engine": [at("studies", "engine"), at("sweeps", "engine")],
                       "report": [at("report", "__init__"), at("studies", "report")],
                       "spec": [at("studies", "spec"), at("sweeps", "spec")]}
    for module in ("engine", "report", "spec"):
        (tmp_path / at("studies", module)).rename(tmp_path / at("studies", f"study_{module}"))
    assert found() == {}   # the sweeps keep theirs: one module of each name is no clash


def test_the_file_models_import_neither_torch_nor_mlflow():
    """Reading a sweep or study file answers a mistake in it before torch or MLflow is imported (each
    takes seconds), so nothing in harness/specs imports them when the module is imported."""
    modules = sorted(_module(p) for p in ROOT.glob("harness/specs/*.py"))
    code = (f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
            "print(sorted(m for m in ('torch', 'mlflow', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- the documents drawn from the floors ---------------------------------------------------------------
def _drawn_floors() -> list[set[str]]:
    """The names in the first column of each floor of docs/ARCHITECTURE.md's drawing, top first."""
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    drawing = text.split("```\n", 2)[1]
    floors: list[set[str]] = [set()]
    for line in drawing.splitlines():
        if line.strip() == "│":
            floors.append(set())
        elif line.startswith(" ") and not line.startswith("  "):
            floors[-1] |= set(line[1:].split("  ")[0].split())
    return floors


def _drawn_name(entry: str) -> str:
    """How the drawing names a LAYERS entry: a package as its folder, a module as its file."""
    name = entry.removesuffix(".*").rpartition(".")[2] if entry != "experiments.*" else "experiments"
    return f"{name}/" if entry.endswith(".*") else f"{name}.py"


def test_the_architecture_drawing_is_the_floors_of_layers():
    """docs/ARCHITECTURE.md draws LAYERS top first: each floor of the drawing names the folders and
    modules of one floor of LAYERS (the bottom floor as "bottom", its modules in its text)."""
    drawn = _drawn_floors()
    floors = list(reversed(LAYERS))
    assert len(drawn) == len(floors), f"the drawing has {len(drawn)} floors, LAYERS {len(floors)}"
    for (label, names), shown in zip(floors[:-1], drawn[:-1]):
        wanted = {_drawn_name(n) for n in names if n != "harness.__main__"}
        assert shown == wanted, f"floor '{label}': drawn {sorted(shown)}, LAYERS {sorted(wanted)}"
    assert drawn[-1] == {"bottom"}
    bottom = (ROOT / "docs/ARCHITECTURE.md").read_text().split("\n bottom", 1)[1].split("```")[0]
    missing = [n for n in floors[-1][1] if n != "harness" and n.rpartition(".")[2] not in bottom]
    assert not missing, f"the drawing's bottom floor does not name {missing}"


def test_the_readme_layout_names_every_folder_of_the_harness():
    """The README's layout block lists harness/'s folders, and no folder that is not there."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("harness/       the library"):].split("\nbenchmarks/", 1)[0]
    names = [line.split("  ")[1] for line in block.splitlines() if line.startswith("  ")]
    listed = {n.removesuffix("/") for line in names for n in line.split() if n.endswith("/")}
    folders = {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert listed == folders, f"README lists {sorted(listed)}, harness/ has {sorted(folders)}"


def test_every_package_folder_is_listed_for_the_install():
    """pyproject.toml names the packages (no discovery): a folder left out is missing from a
    non-editable install, though every test here passes from the checkout."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {_module(p) for p in SOURCES if p.name == "__init__.py"}
    assert folders - listed == set()
