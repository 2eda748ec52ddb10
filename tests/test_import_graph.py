"""The import graph of the ``axe`` package: no circles, and the layering of the README's architecture section.

Every ``import`` of an axe module by an axe module is an edge, wherever it is written: at module
level or inside a function (a deferred import hides a dependency from the reader, it does not
remove it).  Imports of packages outside axe (TVM, torch, cuda.bindings, numpy) are not edges:
axe cannot import itself through them.  The graph is read from the source with :mod:`ast`, so
the test needs neither TVM nor torch to be importable.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "axe")


def _modules() -> dict:
    """``{dotted name: file}`` of every module of the axe package (a package is its ``__init__``)."""
    out = {}
    for folder, _dirs, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), os.path.dirname(ROOT))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(folder, f)
    return out


def _resolve(name: str, modules: dict) -> str | None:
    """The axe module ``name`` denotes (``axe.a.b.c`` where ``c`` is an attribute: ``axe.a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node, module: str, is_package: bool, modules: dict) -> list:
    """The axe modules one import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module
        # ``from pkg import sub`` imports the submodule where one of that name exists
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem for a in node.names]
    found = []
    for n in names:
        if n == "axe" or n.startswith("axe."):
            target = _resolve(n, modules)
            if target and target != module:
                found.append(target)
    return found


def import_graph() -> dict:
    """``{module: {imported axe module: first line that imports it}}``.

    An import of ``axe.a.b`` also runs ``axe.a``'s ``__init__``, but that edge is ``axe.a.b``'s
    ancestors' business, not the importer's: counting it would make every module of a package
    whose ``__init__`` re-exports it part of a circle with that ``__init__``."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        edges = graph.setdefault(module, {})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, module, is_package, modules):
                    edges.setdefault(target, node.lineno)
    return graph


def cycles(graph: dict) -> list:
    """One circle ``[m0, m1, ..., m0]`` through each strongly connected component of more than one
    module (Tarjan's algorithm, iterative), so that a failure lists every circle there is."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    return [_circle_in(sorted(c)[0], c, graph) for c in comps]


def _circle_in(start: str, comp: set, graph: dict) -> list:
    """A shortest circle from ``start`` back to itself inside ``comp`` (breadth-first)."""
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if nxt in comp and nxt not in parent:
                    parent[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"{start} is on no circle of {sorted(comp)}")


def _describe(cycle: list, graph: dict) -> str:
    return "\n".join(f"  {a} imports {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def test_finds_planted_cycles():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4, "e": 5}, "e": {"d": 6}, "f": {"f": 7}}
    found = sorted(cycles(graph))
    assert found == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert cycles({"a": {"b": 1}, "b": {}, "c": {"a": 2, "b": 3}}) == []


def test_reads_relative_and_function_level_imports():
    graph = import_graph()
    # a relative import at module level, and one inside a function body
    assert "axe.schedules.registry" in graph["axe.schedules.dispatch"]
    assert "axe.schedules.source" in graph["axe.schedules.dispatch"]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles in axe:\n" + "\n\n".join(_describe(c, graph) for c in found)


#: the package table (README, Architecture): what each shared layer must not import
LAYERS = {
    "axe.layout": ("axe.",),                       # nothing of axe outside axe.layout
    "axe.ops": ("axe.schedules", "axe.backends", "axe.lang", "axe.runtime"),
    # ``axe.backends`` itself (the folder whose packages are the backends, found by scanning it)
    # is shared; a backend in it is not
    "axe.schedules": ("axe.backends.", "axe.lang", "axe.runtime"),
    "axe.backends": ("axe.lang",),
}


def _below(module: str, forbidden: str) -> bool:
    """``module`` is ``forbidden`` or inside it; ``"pkg."`` forbids what is inside ``pkg`` only."""
    if forbidden.endswith("."):
        return module.startswith(forbidden)
    return module == forbidden or module.startswith(forbidden + ".")


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layering(layer):
    graph = import_graph()
    bad = []
    for module, edges in sorted(graph.items()):
        if module != layer and not module.startswith(layer + "."):
            continue
        for target, line in edges.items():
            if target == layer or target.startswith(layer + "."):
                continue
            if any(_below(target, f) for f in LAYERS[layer]):
                bad.append(f"{module} imports {target} (line {line})")
    assert not bad, f"{layer} reaches above its layer:\n  " + "\n  ".join(bad)
