"""A bundle's run.py is made from the modules of export/runner at export time: one file that
needs neither schedx nor anything but the standard library, numpy and TVM, that checks and
runs a bundle, and that compares outputs by the very rule schedx uses (export/runner/compare.py)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from export.runner import compare
from export.runner.source import PARTS, part_body, runner_source, write_runner

RUNTIME_MODULES = {*sys.stdlib_module_names, "__future__", "numpy", "tvm", "tvm_ffi", "cryptography"}


@pytest.fixture(scope="module")
def run_py(tmp_path_factory) -> Path:
    return write_runner(tmp_path_factory.mktemp("runner") / "run.py")


def _run_module(path: Path):
    spec = importlib.util.spec_from_file_location("bundle_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_py_is_one_file_of_the_standard_library_numpy_and_tvm(run_py):
    tree = ast.parse(run_py.read_text())
    imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert imported <= RUNTIME_MODULES, imported - RUNTIME_MODULES
    assert runner_source() == run_py.read_text()  # the same parts give the same bytes: the manifest hashes them
    for name in PARTS:  # every part is in it, whole
        assert part_body(name) in run_py.read_text()


def test_run_py_runs_without_schedx_and_refuses_a_changed_file(run_py, tmp_path):
    """``-I``: not the working folder's packages; the check runs before anything is loaded."""
    helped = subprocess.run([sys.executable, "-I", "-S", str(run_py), "--help"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and "--trust" in helped.stdout, helped.stderr
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "lib.so").write_bytes(b"a library")
    files = {"lib.so": {"role": "library", "sha256": "0" * 64}}
    (bundle / "manifest.json").write_text(json.dumps({"format": "schedx-bundle", "format_version": 1, "files": files}))
    (bundle / "run.py").write_text(run_py.read_text())
    proc = subprocess.run([sys.executable, "-I", "run.py", "--json"], capture_output=True, text=True, cwd=bundle,
                          timeout=60)  # the bundle's own folder is the default
    assert proc.returncode == 2, proc.stderr
    assert "lib.so does not match the sha256" in json.loads(proc.stdout)["error"]


CASES = [  # (outputs, references, keywords): agreeing, off by a little, off by a lot, exact integers, a sigmoid
    ([np.float32([1.0, 2.0])], [np.float32([1.0, 2.00001])], {}),
    ([np.float32([1.0, 2.0])], [np.float32([1.0, 2.5])], {}),
    ([np.int32([3, 4])], [np.int32([3, 5])], {}),
    ([np.float32([1e-5, 0.5])], [np.float32([1.2e-5, 0.5])], {"activations": ["Sigmoid"]}),
    ([np.float32([0.1, 0.2]), np.float32(1.0)], [np.float32([0.1, 0.2]), np.float32(1.5)], {"rtol": 1e-3}),
]


@pytest.mark.parametrize("outputs, references, keywords", CASES)
def test_run_py_compares_by_the_rule_schedx_uses(run_py, outputs, references, keywords):
    from explorer.measure import verify

    bundled = _run_module(run_py)
    assert verify.compare_outputs is compare.compare_outputs  # kernels, export and bundles: one rule
    assert bundled.compare_outputs(outputs, references, **keywords) == compare.compare_outputs(outputs, references,
                                                                                                **keywords)
    assert bundled.TOLERANCES == compare.TOLERANCES
