"""The shape of the code: imports run one way, no cycles, no module or class past its size budget.

The import graph is built from the `import` statements themselves (module level and inside functions, since a lazy
import is still an arrow), so a cycle fails here before it fails at run time. Imports under `if TYPE_CHECKING:`
never run and are not arrows. It covers every top-level package (the product, the libraries, `benchmarks`) and,
for the package-level checks, `tests` too: modules may not import in a circle, and neither may packages (at the
top level, `aio` and `benchmarks`, and one level down, `aio.server` and `aio.dashboard`; a module sitting directly
in a top-level package, such as `aio.settings` or `benchmarks.engine`, counts as a package of its own).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aio", "tiers", "classifier", "quality_monitor", "probes")
LIBRARIES = ("tiers", "classifier", "quality_monitor", "probes")  # they never import the product (aio)
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {_module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_nodes(tree: ast.AST):
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking_block(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that `module` imports: `from a.b import c` names a.b.c when that is a module, else a.b."""
    targets: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        source = _resolve(node, module, path.name == "__init__.py")
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if submodule in known else source)
    return {target for target in targets if target in known and target != module}


def top_level_packages(root: Path = ROOT) -> tuple[str, ...]:
    """Every folder of the repository that is a Python package (`aio`, `tiers`, ..., `benchmarks`)."""
    return tuple(sorted(path.name for path in root.iterdir() if (path / "__init__.py").is_file()))


def import_graph(root: Path = ROOT, packages: tuple[str, ...] | None = None) -> dict[str, set[str]]:
    sources = _sources(root, top_level_packages(root) if packages is None else packages)
    known = set(sources)
    return {module: _imported_modules(module, path, known) for module, path in sources.items()}


def package_of(module: str, is_package: bool, depth: int) -> str:
    """The package `module` belongs to, `depth` names deep; a module directly in a top-level package is its own."""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if depth > 1 and len(parts) == 1 and not is_package:
        return module
    return ".".join(parts[:depth])


def package_graph(root: Path = ROOT, depth: int = 1, packages: tuple[str, ...] | None = None
                  ) -> dict[str, set[str]]:
    """The import graph between packages, `depth` names deep (1: `aio`, `tiers`, ...; 2: `aio.server`, ...)."""
    packages = (*top_level_packages(root), "tests") if packages is None else packages
    sources = _sources(root, packages)
    graph = import_graph(root, packages)
    node = {module: package_of(module, path.name == "__init__.py", depth) for module, path in sources.items()}
    packaged: dict[str, set[str]] = {}
    for module, targets in graph.items():
        packaged.setdefault(node[module], set()).update(node[target] for target in targets)
    return {package: targets - {package} for package, targets in packaged.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None. Iterative DFS with colours."""
    colour = dict.fromkeys(graph, 0)  # 0 unvisited, 1 on the stack, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        path, iterators = [start], [iter(sorted(graph[start]))]
        colour[start] = 1
        while iterators:
            nxt = next(iterators[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                iterators.pop()
            elif colour[nxt] == 1:
                return path[path.index(nxt):] + [nxt]
            elif colour[nxt] == 0:
                colour[nxt] = 1
                path.append(nxt)
                iterators.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_sees_lazy_and_relative_imports_but_not_type_checking_ones(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .leaf import X\n")
    (package / "sub" / "leaf.py").write_text("X = 1\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n"
                                  "def f():\n    from pkg.sub import leaf\n")
    (package / "b.py").write_text("from . import a\nfrom .sub import X\nimport os\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.sub.leaf"}
    assert graph["pkg.b"] == {"pkg.a", "pkg.sub"}
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}


def test_package_graphs_map_modules_to_their_packages(tmp_path):
    for name in ("pkg/sub", "pkg/sub/deep", "bench", "tests"):
        (tmp_path / name).mkdir(parents=True)
    for name in ("pkg", "pkg/sub", "pkg/sub/deep", "bench"):
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "pkg" / "settings.py").write_text("")
    (tmp_path / "pkg" / "sub" / "deep" / "leaf.py").write_text("from pkg import settings\n")
    (tmp_path / "bench" / "run.py").write_text("from pkg.sub.deep import leaf\nfrom tests import helper\n")
    (tmp_path / "tests" / "helper.py").write_text("import bench.run\n")
    assert top_level_packages(tmp_path) == ("bench", "pkg")
    assert package_graph(tmp_path, 1) == {"pkg": set(), "bench": {"pkg", "tests"}, "tests": {"bench"}}
    assert package_graph(tmp_path, 2) == {"pkg": set(), "pkg.settings": set(), "pkg.sub": {"pkg.settings"},
                                          "bench": set(), "bench.run": {"pkg.sub", "tests.helper"},
                                          "tests.helper": {"bench.run"}}


def test_the_project_has_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("depth", [1, 2])
def test_no_import_cycles_between_packages(depth):
    cycle = find_cycle(package_graph(depth=depth))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("package", LIBRARIES)
def test_the_libraries_never_import_the_product(package):
    graph = import_graph()
    offenders = sorted(f"{module} -> {target}" for module, targets in graph.items() if module.split(".")[0] == package
                       for target in targets if target.split(".")[0] == "aio")
    assert not offenders, f"{package} must not import aio: {offenders}"


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif not node.level:
            names.add(node.module or "")
    return names


def test_benchmarks_never_import_the_tests():
    """Tests may use a benchmark's helpers (a live server, a workload), never the reverse."""
    offenders = sorted(f"{path.relative_to(ROOT)} -> {name}" for path in sorted((ROOT / "benchmarks").rglob("*.py"))
                       for name in _imported_names(path) if name.split(".")[0] == "tests")
    assert not offenders, f"benchmarks import tests: {offenders}"


def test_the_server_and_the_dashboard_stay_apart():
    """What both use (auth, JSON text, the app state and its dependencies) is `aio.http`, the SQL both the dashboard
    and `aio report` read is `aio.reports`; the API mounts the dashboard's router, in one place, and that is all."""
    graph = import_graph()
    arrows = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if {package_of(module, False, 2), package_of(target, False, 2)} == {"aio.server", "aio.dashboard"}
                    or module.startswith("aio.dashboard") and target.startswith("aio.server"))
    assert arrows == ["aio.server.app -> aio.dashboard.routes"], arrows


def _python_files() -> list[Path]:
    return [path for package in top_level_packages() for path in sorted((ROOT / package).rglob("*.py"))]


def test_no_module_is_over_its_size_budget():
    long = {str(path.relative_to(ROOT)): n for path in _python_files()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split a concern out): {long}"


def test_no_class_is_over_its_size_budget():
    long = {}
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


def _tiers_floors() -> list[str]:
    """The floors tiers/__init__.py lists, top to bottom, as package-graph nodes (`tiers.engine`, ...)."""
    doc = ast.get_docstring(ast.parse((ROOT / "tiers" / "__init__.py").read_text())) or ""
    lines = doc.split("Floors,", 1)[1].splitlines()[2:] if "Floors," in doc else []
    names = [line.split()[0] for line in lines if line.startswith("  ") and line.split()]
    return ["tiers." + name.removesuffix("/").removesuffix(".py") for name in names]


def test_the_floors_of_tiers_are_the_folders_on_disk_and_import_downwards():
    floors = _tiers_floors()
    assert floors, "tiers/__init__.py's docstring lists no floors"
    on_disk = {f"tiers.{path.stem}" for path in (ROOT / "tiers").iterdir()
               if (path / "__init__.py").is_file() or path.suffix == ".py" and path.name != "__init__.py"}
    assert sorted(floors) == sorted(on_disk), "tiers/__init__.py's floors differ from the folders on disk"
    graph = package_graph(depth=2, packages=("tiers",))
    upward = sorted(f"{package} -> {target}" for package, targets in graph.items() if package in floors
                    for target in targets if target in floors and floors.index(target) <= floors.index(package))
    assert not upward, f"a floor of tiers imports a floor above it: {upward}"
