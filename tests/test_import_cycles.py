"""No import cycles in the library or the page, and the two house rules about what each imports.

Read statically (``ast``), so every import counts, including those inside functions: a lazy import
that closes a cycle only hides it (the module then works or fails depending on who imported what
first). Relative imports are resolved, and ``from pkg import name`` points at the submodule
``pkg.name`` when there is one, else at the package itself.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The packages whose modules are checked, and the page's entry script in a clone.
PACKAGES = ("hookviz",)
SCRIPTS = ("app.py",)
# The page (the one place that imports Streamlit) and the notebook widget (which draws with the
# page's browser code): the rest of ``hookviz`` is the library.
PAGE = "hookviz.app"
NOT_THE_LIBRARY = (PAGE, "hookviz.notebook")
# What the page leaves to the library: the page never imports these itself.
PAGE_NEVER_IMPORTS = frozenset({"torch", "torchvision", "timm"})

Graph = dict[str, set[str]]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``PACKAGES`` and ``SCRIPTS`` under ``root``, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    for script in SCRIPTS:
        if (root / script).is_file():
            found[Path(script).stem] = root / script
    return found


def imported_names(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules ``module`` imports anywhere in its file, as dotted names: for a name that is
    one of ``known``, the module itself; for any other, the absolute name as written."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule ``pkg.sub`` when it exists
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node, except the bodies of ``if TYPE_CHECKING:`` (never run)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def import_graph(root: Path = ROOT) -> Graph:
    """Module -> the modules of the checked packages it imports (outside imports left out)."""
    files = module_files(root)
    known = set(files)
    return {
        module: {name for name in imported_names(module, path, known) if name in known}
        for module, path in files.items()
    }


def find_cycles(graph: Graph) -> list[list[str]]:
    """The import cycles of ``graph``: for every import that lies on a cycle, the shortest
    cycle through it, each once, as ``[a, b, c, a]`` starting at its smallest name."""
    cycles: set[tuple[str, ...]] = set()
    for component in _strong_components(graph):
        for start in sorted(component):
            for first in sorted(graph[start] & component):
                back = _shortest_path(graph, first, start, component)
                if back is not None:
                    cycles.add(_rotated([start, *back]))
    return sorted([*cycle, cycle[0]] for cycle in cycles)


def _strong_components(graph: Graph) -> list[set[str]]:
    """The strongly connected components that hold a cycle (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(component)
    return components


def _shortest_path(graph: Graph, start: str, goal: str, within: set[str]) -> list[str] | None:
    """The modules from ``start`` to ``goal`` (both included) by the fewest imports."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while came_from[path[-1]] is not None:
                path.append(came_from[path[-1]])  # type: ignore[arg-type]
            return path[::-1][:-1] if start != goal else []
        for child in sorted(graph[node] & within):
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return None


def _rotated(cycle: list[str]) -> tuple[str, ...]:
    first = cycle.index(min(cycle))
    return tuple(cycle[first:] + cycle[:first])


def describe(cycles: list[list[str]]) -> str:
    """One line per cycle: ``a -> b -> c -> a``."""
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def forbidden_imports(
    prefixes: tuple[str, ...],
    banned: frozenset[str],
    root: Path = ROOT,
    except_under: tuple[str, ...] = (),
):
    """(module, outside package) for every module of one of ``prefixes`` (a package or a
    script), but not of ``except_under``, that imports a top-level package of ``banned``,
    anywhere in its file."""
    files = module_files(root)
    found = []

    def under(module: str, names: tuple[str, ...]) -> bool:
        return any(module == name or module.startswith(name + ".") for name in names)

    for module, path in files.items():
        if not under(module, prefixes) or under(module, except_under):
            continue
        tops = {name.split(".")[0] for name in imported_names(module, path, set(files))}
        found.extend((module, top) for top in sorted(tops & banned))
    return found


def test_no_import_cycles_in_the_library_or_the_page():
    graph = import_graph()
    assert "hookviz.models.registry" in graph and PAGE in graph, "the checked packages moved"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (a lazy import inside a function counts too):\n" + describe(
        cycles
    )


def test_the_library_never_imports_streamlit():
    streamlit = frozenset({"streamlit"})
    assert forbidden_imports(("hookviz",), streamlit, except_under=NOT_THE_LIBRARY) == []


def test_the_page_never_imports_torch():
    page = (PAGE, *(Path(script).stem for script in SCRIPTS))
    assert forbidden_imports(page, PAGE_NEVER_IMPORTS) == []


def test_the_checker_sees_a_cycle_closed_by_a_lazy_relative_import(tmp_path):
    """The checker itself: a cycle through ``from . import b`` inside a function, and one through
    ``from pkg.c import name``, are both found and written out."""
    package = tmp_path / "hookviz"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from . import b\n")
    (package / "b.py").write_text("from hookviz.c import thing\n")
    (package / "c.py").write_text("import hookviz.a\nthing = 1\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import e\n"
    )
    (package / "e.py").write_text("from .d import TYPE_CHECKING\n")
    cycles = find_cycles(import_graph(tmp_path))
    assert describe(cycles) == "hookviz.a -> hookviz.b -> hookviz.c -> hookviz.a"
