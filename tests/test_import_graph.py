"""Imports point one way: no two modules of the optimizer import each other, directly or through others, even
from inside a function (a hidden cycle works only while the import order happens to suit it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "optimizer"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _targets(mods: dict[str, Path], current: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = current if mods[current].name == "__init__.py" else current.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            base = f"{base}.{node.module}" if node.module else base
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = []
    for name in names:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in mods and name != current:
            out.append(name)
    return out


def import_graph(typing_too: bool = False) -> dict[str, set[str]]:
    """Module -> the optimizer modules it imports anywhere in its body (with ``typing_too``, also the imports only a
    type checker runs)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and (typing_too or id(node) not in typing_only):
                graph[name].update(_targets(mods, name, node))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_optimizer_modules_import_one_way() -> None:
    graph = import_graph()
    assert "optimizer.study.driver" in graph and graph["optimizer.study.driver"], "the graph was not read"
    assert cycles(graph) == []


def test_the_display_does_not_import_the_driver_even_for_types() -> None:
    # the driver imports the display (optimizer/progress.py), which reads it through a Protocol of its own
    graph = import_graph(typing_too=True)
    assert "optimizer.progress" in graph["optimizer.study.driver"]
    assert not any(
        m.startswith("optimizer.study") and m != "optimizer.study.records" for m in graph["optimizer.progress"]
    )
