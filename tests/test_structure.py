"""The shape of the code: imports run one way, no cycles, no module or class past its size budget.

The import graph is built from the `import` statements themselves (module level and inside functions, since a lazy
import is still an arrow), so a cycle fails here before it fails at run time. Imports under `if TYPE_CHECKING:`
never run and are not arrows.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aio", "tiers", "classifier", "quality_monitor", "probes")
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


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    sources = _sources(root, packages)
    known = set(sources)
    return {module: _imported_modules(module, path, known) for module, path in sources.items()}


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


def test_the_project_has_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("package", ["tiers", "classifier", "quality_monitor", "probes"])
def test_the_libraries_never_import_the_product(package):
    graph = import_graph()
    offenders = sorted(f"{module} -> {target}" for module, targets in graph.items() if module.split(".")[0] == package
                       for target in targets if target.split(".")[0] == "aio")
    assert not offenders, f"{package} must not import aio: {offenders}"


def _python_files() -> list[Path]:
    roots = [ROOT / package for package in (*PACKAGES, "benchmarks", "migrations") if (ROOT / package).is_dir()]
    return [path for root in roots for path in sorted(root.rglob("*.py"))]


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
