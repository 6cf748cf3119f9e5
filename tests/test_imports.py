"""The packages' layering, read from the source: the module import graph of ``allocator``,
``policies`` and ``envs`` is acyclic, ``allocator`` imports nothing from ``policies`` or ``envs``,
and ``policies`` imports from ``envs`` only in its training layer.

The graph has an edge for every import made when a module is imported: module-level imports
(inside ``if``/``try``/``with`` too), not those inside functions, and not those under
``if TYPE_CHECKING:``. Importing ``a.b.c`` also imports the packages ``a`` and ``a.b``.
(The one call-time reference from ``allocator`` to ``policies``:
``allocator.seams.default_eviction_policy``.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("allocator", "policies", "envs")
# policies' training layer builds environments and evaluates through them: it sits above envs
POLICIES_MAY_IMPORT_ENVS = "cachegym.policies.training"


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = ["cachegym", *path.relative_to(ROOT).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imported_names(body: list[ast.stmt], module: str, is_package: bool) -> Iterator[str]:
    """Dotted names imported when ``body`` runs at module level (``from m import x`` yields
    ``m`` and ``m.x``: ``x`` may be a submodule)."""
    for node in body:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package of this module
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _imported_names(node.body, module, is_package)
                yield from _imported_names(node.orelse, module, is_package)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _imported_names(block, module, is_package)
        elif isinstance(node, ast.With):
            yield from _imported_names(node.body, module, is_package)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the three packages it imports when imported."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        deps: set[str] = set()
        for name in _imported_names(ast.parse(path.read_text()).body, mod, path.name == "__init__.py"):
            parts = name.split(".")
            while parts and ".".join(parts) not in mods:
                parts.pop()
            # the module and its parent packages, less this module's own (already importing)
            for k in range(2, len(parts) + 1):  # (not "cachegym": its __init__ imports all)
                dep = ".".join(parts[:k])
                if dep != mod and not mod.startswith(dep + "."):
                    deps.add(dep)
        graph[mod] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _package(mod: str) -> str:
    return mod.split(".")[1]  # cachegym.<package>...


def test_the_graph_is_read() -> None:
    """The parser sees the imports it must (a broken reader would pass every test below)."""
    g = import_graph()
    assert {"cachegym.allocator.pool", "cachegym.allocator.seams", "cachegym.policies.lru", "cachegym.envs.evict"} <= set(g)
    assert "cachegym.allocator.seams" in g["cachegym.allocator.pool"] and "cachegym.allocator" in g["cachegym.policies.base"]
    assert "cachegym.policies.base" in g["cachegym.policies.lru"]
    assert "cachegym.allocator.backends" not in g["cachegym.allocator.pool"]  # under TYPE_CHECKING only


def test_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_allocator_imports_nothing_from_policies_or_envs() -> None:
    upward = {m: sorted(d for d in deps if _package(d) != "allocator")
              for m, deps in import_graph().items() if _package(m) == "allocator"}
    assert {m: d for m, d in upward.items() if d} == {}


def test_policies_import_envs_only_in_training() -> None:
    upward = {m: sorted(d for d in deps if _package(d) == "envs")
              for m, deps in import_graph().items() if _package(m) == "policies"}
    outside = {m: d for m, d in upward.items()
               if d and m != POLICIES_MAY_IMPORT_ENVS
               and not m.startswith(POLICIES_MAY_IMPORT_ENVS + ".")}
    assert outside == {}
