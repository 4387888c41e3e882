"""The house rules, checked on the source: floors import only from below, no import cycles,
no module over 500 lines, no function over 80 lines, the core is stdlib only.

Floors, lowest first: core (and kvcalc.errors) -> sources -> app -> render -> probe -> cli.
Every import counts, the lazy ones inside functions too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "kvcalc"
FLOORS = ("core", "sources", "app", "render", "probe", "cli")
# top-level modules outside the floors and the floor they sit on
TOP = {"kvcalc.errors": "core", "kvcalc.words": "core", "kvcalc": "core", "kvcalc.__main__": "cli", "kvcalc.presets": "sources"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def floor(module: str) -> str:
    if module in TOP:
        return TOP[module]
    return module.split(".")[1]


def sources() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(ROOT.rglob("*.py"))}


def imports(tree: ast.Module, me: str) -> set[str]:
    out: set[str] = set()
    package = me if me.count(".") == 0 or me.endswith("__init__") else me.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def kvcalc_imports(tree: ast.Module, me: str, known: set[str]) -> set[str]:
    return {m for m in imports(tree, me) if m in known and m != me}


MODULES = sources()
KNOWN = set(MODULES)


def test_floors_import_only_from_below():
    wrong = []
    for me, tree in MODULES.items():
        for other in kvcalc_imports(tree, me, KNOWN):
            if FLOORS.index(floor(other)) > FLOORS.index(floor(me)):
                wrong.append(f"{me} ({floor(me)}) imports {other} ({floor(other)})")
    assert wrong == []


def test_no_import_cycles():
    graph = {me: kvcalc_imports(tree, me, KNOWN) for me, tree in MODULES.items()}
    # a package's __init__ importing its own submodules is no cycle of the design
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_core_is_stdlib_only():
    stdlib = set(sys.stdlib_module_names)
    wrong = []
    for me, tree in MODULES.items():
        if floor(me) != "core":
            continue
        for m in imports(tree, me):
            top = m.split(".")[0]
            if m and top not in stdlib and top != "kvcalc" and top != "__future__":
                wrong.append(f"{me} imports {m}")
            elif top == "kvcalc" and m in KNOWN and floor(m) != "core":
                wrong.append(f"{me} imports {m}")
    assert wrong == []


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_function_sizes(path: Path):
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= 500, f"{path.name} has {text.count(chr(10))} lines (at most 500)"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []
