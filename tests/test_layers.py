"""The import structure of ``src/recourselab``: no cycle between modules, and layers import downward only.

Every module is read with :mod:`ast` (nothing is imported), module-level and function-local imports
alike; imports under ``if TYPE_CHECKING:`` are left out, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "recourselab"

#: Layer of each top-level part of the package; a module may import modules of its own layer or lower.
RANKS = {
    "": 0,  # recourselab/__init__.py
    "_version": 0, "fields": 0, "rng": 0, "lazy": 0, "errors": 0, "io": 0, "runtime": 0, "provenance": 0,
    "progress": 0,
    "config": 1,
    "data": 2,
    "models": 3,
    "methods": 4, "densityflow": 4, "discover": 4,
    "metrics": 5, "report": 5,
    "pipeline": 6, "orchestration": 6, "prefect_server": 6, "cli": 6,
}

#: Modules ranked apart from their package: the library's settings declarations, leaves that import
#: only layer 0, sit at the config layer so that ``recourselab.config`` derives its sections from them.
MODULE_RANKS = {"recourselab.densityflow.config": 1, "recourselab.discover.settings": 1}

#: Upward imports still present (importer, imported). The set is exact: a removed violation must
#: leave it, and a new one fails the test.
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: Top-level packages of the checkout that only the pipeline may import.
PIPELINE_ONLY = ("flows", "stages")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every Import / ImportFrom node of ``tree``, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_names(name: str, path: Path, known: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Absolute dotted names that module ``name`` (file ``path``) imports.

    ``from a import b`` names ``a.b`` when that is one of the ``known`` modules, else ``a`` (where
    ``b`` is defined); ``import a.b`` names ``a.b``.
    """
    is_package = path.name == "__init__.py"
    out = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:  # relative: from the module's package, up level - 1 packages
            pkg = name.split(".") if is_package else name.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join([*pkg, base] if base else pkg)
        for alias in node.names:
            out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (edges inside ``recourselab``)."""
    mods = modules()
    return {name: {m for m in imported_names(name, path, set(mods)) if m in mods and m != name}
            for name, path in mods.items()}


def rank(module: str) -> int:
    if module in MODULE_RANKS:
        return MODULE_RANKS[module]
    part = module.split(".")[1] if "." in module else ""
    if part not in RANKS:
        pytest.fail(f"{module}: no layer in RANKS of tests/test_layers.py; give its top-level part one")
    return RANKS[part]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_walk_sees_every_kind_of_import():
    graph = import_graph()
    assert "recourselab.discover.settings" in graph and "recourselab.errors" in graph
    # module level, function local (fit subsamples its rows inside the method), and
    # nothing from a TYPE_CHECKING block (strategies annotates with ProposalSpace only)
    assert "recourselab.errors" in graph["recourselab.discover.settings"]
    assert "recourselab.data.split" in graph["recourselab.densityflow.training"]
    assert "recourselab.discover.proposals" not in graph["recourselab.discover.strategies"]


def test_find_cycle_reports_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_config_imports_only_lower_layers():
    assert {rank(dep) for dep in import_graph()["recourselab.config"]} <= {0, 1}


def test_layers_import_downward_only():
    upward = {(mod, dep) for mod, deps in import_graph().items() for dep in deps if rank(dep) > rank(mod)}
    new = sorted(upward - KNOWN_UPWARD)
    fixed = sorted(KNOWN_UPWARD - upward)
    assert not new, "imports from a lower layer to a higher one: " + ", ".join(f"{a} -> {b}" for a, b in new)
    assert not fixed, "no longer upward, remove from KNOWN_UPWARD: " + ", ".join(f"{a} -> {b}" for a, b in fixed)


def test_library_never_imports_the_pipeline():
    mods = modules()
    library = [m for m in mods if rank(m) < RANKS["pipeline"]]
    bad = sorted((m, dep) for m in library for dep in imported_names(m, mods[m], set(mods))
                 if dep.split(".")[0] in PIPELINE_ONLY or dep == f"{PACKAGE}.orchestration"
                 or dep.startswith(f"{PACKAGE}.orchestration."))
    assert not bad, "library modules importing the pipeline: " + ", ".join(f"{a} -> {b}" for a, b in bad)
