"""Imports point one way: app -> export -> search -> explorer, and export/search/app -> store.

explorer never imports store, search, export or app (but ``store.outcome``, the one vocabulary of
how a measurement ends, and ``export.verify_bundle``, the one rule that compares outputs, which a
bundle's run.py carries: both import nothing of schedx); store never imports TVM; only app imports
streamlit or click. No two modules import each other (at any depth of a function), no concept
is defined twice (one ``Task``, one target parser), and libraries never print.

Behaviour too: no module outside ``explorer/target`` branches on a target's kind or reads a
target spelling (it asks the target object), and no measurement outcome is a bare string
outside ``store.outcome.Outcome``."""

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


# modules a room may import although their package is forbidden to it: each imports nothing of schedx
# (export.verify_bundle, the bundle's run.py, is where the output comparison rule is written once)
ALLOWED = {"explorer": {"store.outcome", "export.verify_bundle"}}


def _imports(path: Path, allowed: set[str] = frozenset()) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names if a.name not in allowed}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module not in allowed:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_import_direction(room):
    bad = []
    for path in sorted((ROOT / room).rglob("*.py")):
        wrong = _imports(path, ALLOWED.get(room, set())) & FORBIDDEN[room]
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
                                               ("CpuTarget", "explorer/target/model.py"),
                                               ("CudaTarget", "explorer/target/model.py"),
                                               ("Outcome", "store/outcome.py"),
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


# words that name a kind of target (or its runtime device) when a string is compared with them
TARGET_WORDS = {"cpu", "cuda", "llvm", "gpu", "aarch64", "arm64", "x86_64", "x86-64", "rocm", "metal", "vulkan",
                "opencl", "riscv64"}
# programs copied into bundles or run beside them without schedx: they read the manifest themselves
STANDALONE = {"export/verify_bundle.py", "export/gpu_check.py"}


def _outside_target_package():
    for room, path in _sources():
        rel = str(path.relative_to(ROOT))
        if not rel.startswith("explorer/target/") and rel not in STANDALONE:
            yield rel, path.read_text()


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e) for e in node.elts)) if node.elts else set()
    return set()


def test_only_the_target_package_branches_on_a_target_kind():
    """``target.kind == "cuda"`` and kin belong in the target's class: callers ask it (a
    property, a method) so that a new kind of target touches one package."""
    offenders = []
    for rel, text in _outside_target_package():
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            words = set().union(*(_strings(side) for side in sides)) & TARGET_WORDS
            subject = " ".join(ast.unparse(side) for side in sides if not _strings(side))
            if words and any(w in subject for w in ("kind", "device", "target", "arch")):
                offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "ask the target instead:\n" + "\n".join(offenders)


def test_only_the_target_package_reads_a_target_spelling():
    offenders = []
    for rel, text in _outside_target_package():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("partition", "split", "startswith") and node.args \
                    and _strings(node.args[0]) & {":", "cuda", "llvm", "aarch64"} \
                    and "target" in ast.unparse(node.func.value).lower():
                offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "parse it with explorer.target.parse_target:\n" + "\n".join(offenders)


def test_outcomes_are_the_enum_not_strings():
    """A measurement's status is compared with and set to ``Outcome`` members, never a string."""
    from store.outcome import Outcome

    values = {o.value for o in Outcome}
    offenders = []
    for room, path in _sources():
        rel = str(path.relative_to(ROOT))
        if rel in ("store/outcome.py", *STANDALONE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if set().union(*(_strings(side) for side in sides)) & values and \
                        any(isinstance(side, ast.Attribute) and side.attr in ("status", "outcome") for side in sides):
                    offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.keyword) and node.arg == "status" and _strings(node.value) & values:
                offenders.append(f"{rel}:{node.value.lineno}: status={ast.unparse(node.value)}")
    assert not offenders, "use store.outcome.Outcome:\n" + "\n".join(offenders)
