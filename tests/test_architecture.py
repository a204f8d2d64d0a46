"""Imports point one way: app -> export -> search -> explorer, and export/search/app -> store.

explorer never imports store, search, export or app; store never imports TVM; only app imports
streamlit or click. No two modules import each other (at any depth of a function), no concept
is defined twice (one ``Task``, one target parser), and libraries never print."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("app", "export", "search", "explorer", "store")
FORBIDDEN = {
    "explorer": {"store", "search", "export", "app", "streamlit", "click"},
    "search": {"export", "app", "streamlit", "click"},
    "export": {"app", "streamlit", "click"},
    "store": {"tvm", "tvm_ffi", "explorer", "search", "export", "app", "streamlit", "click"},
}


def _sources():
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            yield room, path


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_import_direction(room):
    bad = []
    for path in sorted((ROOT / room).rglob("*.py")):
        wrong = _imports(path) & FORBIDDEN[room]
        if wrong:
            bad.append(f"{path.relative_to(ROOT)} imports {sorted(wrong)}")
    assert not bad, "\n".join(bad)


def _module_graph() -> dict[str, set[str]]:
    mods = {}
    for _, path in _sources():
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = path

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r and r != m:
                    graph[m].add(r)
    return graph


def test_no_import_cycles():
    graph = _module_graph()
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles (move the shared piece down):\n" + "\n".join(cycles)


@pytest.mark.parametrize("concept, one_home", [("Task", "explorer/workload/task.py"),
                                               ("Target", "explorer/target/model.py"),
                                               ("Workload", None)])
def test_one_definition_per_concept(concept, one_home):
    homes = []
    for _, path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == concept:
                homes.append(str(path.relative_to(ROOT)))
    if one_home is None:  # the loaded workload and the store's row are two things with two names' rooms
        assert sorted(homes) == ["explorer/workload/loaded.py", "store/records.py"], homes
    else:
        assert homes == [one_home], homes


def test_one_target_parser_and_no_dunder_imports():
    offenders = []
    for _, path in _sources():
        text = path.read_text()
        if "__import__(" in text:
            offenders.append(f"{path.relative_to(ROOT)} uses __import__")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name in ("parse_target", "host_target", "_target") \
                    and "explorer/target" not in str(path):
                offenders.append(f"{path.relative_to(ROOT)} defines {node.name}")
    assert not offenders, offenders


def test_libraries_never_print():
    offenders = []
    for room in ("explorer", "search", "store", "export"):
        for path in (ROOT / room).rglob("*.py"):
            if path.name == "verify_bundle.py":  # copied into bundles as run.py: a program, not a library
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
