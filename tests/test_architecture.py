"""Imports point one way: app -> export -> search -> explorer, and export/search/app -> store.

explorer never imports store, search, export or app (but ``store.outcome``, the one vocabulary of
how a measurement ends, ``store.values``, the one ``to_dict`` of values that cross rooms, and
``export.runner.compare``, the one rule that compares outputs, which a bundle's run.py carries: all
three import nothing of schedx); store never imports TVM; only app imports
streamlit or click. No two modules import each other (at any depth of a function, or at import time
through a package's ``__init__``), every module of explorer imports on its own in a fresh process, no concept
is defined twice (one ``Task``, one target parser), and libraries never print.

Behaviour too: no module outside ``explorer/target`` branches on a target's kind or reads a
target spelling (it asks the target object), no measurement outcome is a bare string
outside ``store.outcome.Outcome``, no file imports another file's private names, and every front
end (export, bench, profile, sweep; command line and pages) ships what one chooser answers
(``export.shipping.shipped_schedules``)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
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
# (export.runner.compare, part of every bundle's run.py, is where the output comparison rule is written once;
# store.values, the one to_dict/from_dict of values that cross rooms; store.lazy, the one lazy loader)
ALLOWED = {"explorer": {"store.outcome", "store.values", "store.lazy", "export.runner.compare"}}


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


def _runs_at_import(tree: ast.Module) -> list[ast.AST]:
    """The nodes of a module that run when it is imported: not a function's body, not ``if TYPE_CHECKING``."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _module_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, at any depth of a function; and, for an import that runs when
    the module is imported, the packages above the imported module that are not its own: importing
    ``explorer.passes.x`` runs ``explorer/passes/__init__.py`` first, and a package that imports its
    modules eagerly closes a cycle that no ``import`` line names (the one that made
    ``explorer.schedule.defaults.expand_depthwise`` fail to import on its own)."""
    mods = {}
    for _, path in _sources():
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = path

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    def packages_above(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))} & mods.keys()

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        tree = ast.parse(path.read_text())
        at_import = {id(node) for node in _runs_at_import(tree)}
        for node in ast.walk(tree):
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
                    if id(node) in at_import:  # its own packages are imported already when it runs
                        graph[m] |= packages_above(r) - packages_above(m) - {m}
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
    assert not cycles, ("import cycles (move the shared piece down, or let the package load its names on first "
                        "use: store.lazy):\n" + "\n".join(cycles))


# imports TVM and the libraries explorer builds on once, then imports each module given on stdin in a fresh
# child (forked before any schedx module is loaded): the modules that fail, with their error
_IMPORT_EACH = """
import importlib, os, signal, sys
import numpy, onnx, tvm
from tvm import relax, s_tir
for name in sys.stdin.read().split():
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)  # an import that hangs dies (SIGALRM) and is named, not the whole run
        try:
            importlib.import_module(name)
        except BaseException as err:
            print(f"{name}: {type(err).__name__}: {err}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print(f"{name}: killed by signal {os.WTERMSIG(status)}", flush=True)
    elif os.WEXITSTATUS(status):
        print(f"{name}: exited with status {os.WEXITSTATUS(status)}", flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_explorer_module_imports_on_its_own():
    """Each module of explorer imports first in a fresh process (what a notebook, a bundle's build or a
    search worker may do), whatever order the rest of the suite imports them in (about 10 s)."""
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
             for p in sorted((ROOT / "explorer").rglob("*.py"))]
    proc = subprocess.Popen([sys.executable, "-c", _IMPORT_EACH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        out, err = proc.communicate("\n".join(names), timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the parent and any child still importing
        proc.communicate()
        pytest.fail("importing explorer's modules one by one took over 300 s")
    assert proc.returncode == 0, err[-2000:]
    assert not out.strip(), "modules that fail to import on their own:\n" + out


@pytest.mark.parametrize("concept, one_home", [("Task", "explorer/workload/task.py"),
                                               ("Target", "explorer/target/model.py"),
                                               ("CpuTarget", "explorer/target/model.py"),
                                               ("CudaTarget", "explorer/target/cuda.py"),
                                               ("TargetKind", "explorer/target/kind.py"),
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
            if path.parent == ROOT / "export" / "runner":  # joined into bundles as run.py: a program, not a library
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


# words that name a kind of target (or its runtime device) when a string is compared with them
TARGET_WORDS = {"cpu", "cuda", "llvm", "gpu", "aarch64", "arm64", "x86_64", "x86-64", "rocm", "metal", "vulkan",
                "opencl", "riscv64"}
# programs joined into bundles (a bundle's run.py: export/runner/) or run beside them without schedx: they
# read the manifest themselves
STANDALONE = {"export/gpu_check.py", *(f"export/runner/{p.name}" for p in (ROOT / "export" / "runner").glob("*.py"))}


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


def test_traces_are_replayed_in_one_place():
    """A trace is replayed by ``explorer.schedule.trace.replay`` only, which registers schedx's own
    tensor intrinsics before it replays."""
    replays = {str(path.relative_to(ROOT)) for _, path in _sources() for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and node.attr == "apply_json_to_schedule"}
    assert replays == {"explorer/schedule/trace.py"}, "call explorer.schedule.trace.replay instead"


def _schedx_module(name: str) -> bool:
    return name.split(".")[0] in ROOMS


# Private names one file still imports from another, each waiting on the engineer who owns the file
# (issue 53 counted 21; the others were made public or moved). The list only shrinks: a pair fixed
# must leave it, and no new pair may join it.
PRIVATE_IMPORTS_LEFT = {
    ("explorer/measure/__init__.py", "explorer.measure.worker._measure_job"),  # explorer/measure: being edited
    ("explorer/models/torch_import.py", "explorer.models.onnx_import._outputs"),  # explorer/models: being edited
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names_imported(path: Path, owned) -> set[tuple[str, str]]:
    """(the file, ``module.name``) for each private name ``path`` takes from a module ``owned``
    accepts: ``from x import _y``, or ``x._y`` on a module it imported (``from pkg import x as m``
    then ``m._y`` too)."""
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    found, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and owned(node.module):
            for a in node.names:
                if _private(a.name):
                    found.add((rel, f"{node.module}.{a.name}"))
                modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if owned(a.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and _private(node.attr):
            found.add((rel, f"{node.value.id}.{node.attr}"))
    return found


def test_no_file_imports_another_files_private_names():
    """``from x import _y`` (or ``x._y`` on an imported module of schedx) reaches into another
    file's insides: make the name public, or move it where both can use it. TVM's own private
    names (``_ffi_api``, ``_normalize_mod``) are TVM's business, not checked here."""
    found = set().union(*(_private_names_imported(path, _schedx_module) for _, path in _sources()))
    new = sorted(found - PRIVATE_IMPORTS_LEFT)
    fixed = sorted(PRIVATE_IMPORTS_LEFT - found)
    assert not new, "make these names public (or move them) instead of importing a private name:\n" + \
        "\n".join(f"{f}: {n}" for f, n in new)
    assert not fixed, f"fixed, take them off PRIVATE_IMPORTS_LEFT: {fixed}"


# the files around the product: the tests, their helper modules and the benchmarks that borrow them
TEST_SIDE = ("tests", "benchmarks")


def _test_side_module(name: str) -> bool:
    return name.split(".")[0] in TEST_SIDE


def test_no_test_file_imports_another_test_files_private_names():
    """The same rule among the tests and benchmarks: a helper that two files use is public in the
    test file that owns it, or lives in a small helper module of tests/ (tests/browser.py,
    tests/isa_asm.py, tests/direct_bf16_conv.py). Checked here for names of tests/ and
    benchmarks/ only: a test may still reach a product module's private name it tests."""
    found = set()
    for folder in TEST_SIDE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found |= _private_names_imported(path, _test_side_module)
    assert not found, "make these names public (or move them to a helper module of tests/):\n" + \
        "\n".join(f"{f}: {n}" for f, n in sorted(found))


# Which schedules ship is answered by one function; every front end reaches it through its entry.
CHOOSER = ("export/shipping.py", "shipped_schedules")
# what the chooser is made of: records chosen per task, the in-model timing; nobody else calls them
CHOOSER_PARTS = {"best_schedules", "workload_schedules", "check_in_model", "checked_schedules"}
ENTRIES = {"export/entry.py": {"run_export": "shipped_schedules", "run_bench": "shipped_schedules",
                               "run_profile": "shipped_schedules", "run_sweep": "sweep"},
           "export/sweep.py": {"sweep": "shipped_schedules"}}
FRONT_ENDS = {"app/cli_export.py": {"export": "run_export", "bench": "run_bench"},
              "app/cli_profile.py": {"profile": "run_profile"},
              "app/cli_sweep.py": {"sweep": "run_sweep"},
              "app/ui/export_page.py": {"build": "run_export"},
              "app/ui/profile_page.py": {"profile_tab": "run_profile", "sweep_tab": "run_sweep"}}


def _called(func: ast.FunctionDef) -> set[str]:
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(func)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def _functions(rel: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((ROOT / rel).read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_front_end_ships_what_the_one_chooser_answers():
    """export, bench, profile and sweep (the command line and the pages) each call their
    spec -> run entry, each entry calls the chooser (export.shipping.shipped_schedules), and no
    other module chooses records or takes the in-model decision itself."""
    homes = [str(path.relative_to(ROOT)) for _, path in _sources()
             if CHOOSER[1] in _functions(str(path.relative_to(ROOT)))]
    assert homes == [CHOOSER[0]], homes
    missing = [f"{rel}: {fn} does not call {callee}" for table in (ENTRIES, FRONT_ENDS) for rel, calls in table.items()
               for fn, callee in calls.items() if callee not in _called(_functions(rel)[fn])]
    assert not missing, "\n".join(missing)
    behind = []
    for _, path in _sources():
        rel = str(path.relative_to(ROOT))
        if rel in (CHOOSER[0], "export/choose.py", "export/in_model.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name in CHOOSER_PARTS:
                    behind.append(f"{rel}:{node.lineno}: {name}")
    assert not behind, "ask export.shipping.shipped_schedules instead:\n" + "\n".join(behind)


def test_session_state_is_touched_only_in_app_state():
    """Every session-state key is a named constant and every access one of app/state.py's small
    functions: a page that reads ``st.session_state`` itself fails here."""
    raw = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        if path == ROOT / "app" / "state.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = (isinstance(node, ast.Attribute) and node.attr == "session_state") or \
                (isinstance(node, ast.Constant) and node.value == "session_state")
            if named:
                raw.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not raw, "use app/state.py's read/write/take/forget/kept instead:\n" + "\n".join(raw)


# explorer's top level holds only what every room of schedx uses; the rest lives in the room that owns it
# (the where-to-put-what map in explorer/__init__.py)
EXPLORER_TOP = {"__init__.py", "errors.py", "precision.py", "interrupts.py", "temp_dirs.py", "processes.py",
                "fault_points.py", "tvm_fast.py", "text.py"}
DEFAULTS = "explorer/schedule/defaults/"
# the modules that write a recurrent layer's kernel (for a target: recurrence.for_target)
RECURRENCE_WRITERS = {f"explorer.schedule.defaults.{m}" for m in ("recurrence", "recurrence_cpu", "recurrence_gpu")}


def test_explorer_top_level_holds_only_cross_cutting_modules():
    loose = sorted({p.name for p in (ROOT / "explorer").glob("*.py")} - EXPLORER_TOP)
    assert not loose, f"move {loose} to the room of explorer that owns it (explorer/__init__.py says where)"


def test_every_default_rule_lives_in_the_defaults_package():
    """A default schedule rule (CPU, GPU, int8, bf16, recurrent) is in ``explorer/schedule/defaults/``:
    nothing else uses dlight's rules, defines a table of ``RULES`` or a function that applies or
    picks a default schedule, or writes a recurrent layer's kernel for a target."""
    offenders = []
    for _, path in _sources():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(DEFAULTS):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "dlight" in node.module.split(".") + \
                    [a.name for a in node.names]:
                offenders.append(f"{rel}:{node.lineno}: imports dlight")
            if isinstance(node, ast.ImportFrom) and node.module in RECURRENCE_WRITERS and \
                    any(a.name in ("for_target", "cpu_recurrence", "gpu_recurrence") for a in node.names) and \
                    not rel.startswith("explorer/models/"):  # the importer emits the kernel of a spec
                offenders.append(f"{rel}:{node.lineno}: writes a recurrent kernel")
        for node in tree.body:
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            names += [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else []
            if "RULES" in names:
                offenders.append(f"{rel}:{node.lineno}: a table of default RULES")
            if isinstance(node, ast.FunctionDef) and (node.name in ("default_schedule", "safe_default") or
                                                      (node.name.startswith("apply_") and "default" in node.name)):
                offenders.append(f"{rel}:{node.lineno}: {node.name}")
    assert not offenders, f"default rules belong in {DEFAULTS}:\n" + "\n".join(offenders)
