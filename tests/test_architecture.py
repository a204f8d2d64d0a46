"""Imports point one way: app -> search -> explorer, search -> store, app -> store.

explorer never imports store, search or app; store never imports TVM; only app imports
streamlit or click."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "explorer": {"store", "search", "app", "streamlit", "click"},
    "search": {"app", "streamlit", "click"},
    "store": {"tvm", "tvm_ffi", "explorer", "search", "app", "streamlit", "click"},
}


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


def test_libraries_never_print():
    offenders = []
    for room in ("explorer", "search", "store"):
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
