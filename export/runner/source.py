"""A bundle's ``run.py``, made from the modules of :mod:`export.runner`: one self-contained file
(standard library, numpy, TVM) that checks, loads, runs and verifies a bundle where schedx is not
installed. Joined at export time; the same parts give the same bytes (the manifest hashes it)."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("bundle_check", "cuda_code", "compare", "threads", "running", "cli")  # each uses only those before it
PACKAGE = "export.runner"
NOTICE = (f"# Made by schedx from {PACKAGE} ({', '.join(p + '.py' for p in PARTS)}) at export time: change those,\n"
          "# not this file (its sha256 is in manifest.json).\n")


def _dropped_lines(tree: ast.Module) -> set[int]:
    """Line numbers of what a joined file must not repeat: the module docstring, ``from
    __future__``, imports of the other parts (they are in the same file now) and ``__all__``."""
    drop: set[int] = set()
    for i, node in enumerate(tree.body):
        doc = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str)
        sibling = isinstance(node, ast.ImportFrom) and node.module is not None and \
            (node.module == "__future__" or node.module.startswith(PACKAGE + "."))
        names = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        if doc or sibling or names:
            drop.update(range(node.lineno, node.end_lineno + 1))
    return drop


def part_body(name: str) -> str:
    """The code of one part as it goes into run.py."""
    text = (HERE / f"{name}.py").read_text()
    drop = _dropped_lines(ast.parse(text))
    kept = [line for n, line in enumerate(text.splitlines(), start=1) if n not in drop]
    return "\n".join(kept).strip("\n") + "\n"


def runner_source() -> str:
    """The text of a bundle's ``run.py``."""
    doc = ast.get_docstring(ast.parse((HERE / "__init__.py").read_text()), clean=False) or ""
    sections = [f'"""{doc}"""\n', NOTICE, "from __future__ import annotations\n"]
    sections += [f"# --- {PACKAGE}.{name} ---\n" + part_body(name) for name in PARTS]
    sections.append('if __name__ == "__main__":\n    sys.exit(main())\n')
    return "\n\n".join(sections)


def write_runner(path: str | Path) -> Path:
    """``run.py`` written at ``path``."""
    path = Path(path)
    path.write_text(runner_source())
    return path


__all__ = ["PARTS", "part_body", "runner_source", "write_runner"]
