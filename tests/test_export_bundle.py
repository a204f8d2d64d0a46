"""CPU export end to end on small workloads: a bundle a fresh process loads with only TVM and
numpy, that computes what ONNX Runtime (models) or numpy (kernels) computes; tampered or
incomplete bundles refused before loading; new weights without recompiling."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest

from explorer.workload import load_workload
from export import BundleError, export_workload, read_manifest, zip_bundle
from export.verify import run_in_child, verify_folder

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "small_cnn"
    report = export_workload("small_cnn", "cpu", folder)
    return report


@pytest.fixture(scope="module")
def matmul_bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "matmul"
    return export_workload("matmul:M=64,N=48,K=32", "cpu", folder)


def test_small_cnn_bundle_matches_onnx_runtime_in_a_fresh_process(cnn_bundle):
    v = cnn_bundle.verification
    assert cnn_bundle.ok and v.ok and v.reference == "ONNX Runtime"
    assert v.max_rel_error < 1e-4 and v.max_abs_error < 1e-3
    assert v.foreign_modules == ()  # the child imported neither schedx nor onnx nor torch
    assert cnn_bundle.layers.ok and len(cnn_bundle.layers.layers) >= 10


def test_manifest_describes_the_bundle(cnn_bundle):
    m = read_manifest(cnn_bundle.folder)
    assert m["workload"]["spec"] == "small_cnn" and m["workload"]["hash"].isdigit()
    assert m["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert m["outputs"][0]["shape"] == [1, 10]
    assert m["target"]["device"] == "cpu" and m["tvm_version"].startswith("0.27")
    assert {"lib.so", "params.bin", "inputs.npz", "reference.npz", "run.py", "README.md"} <= set(m["files"])
    assert all(len(f["sha256"]) == 64 for f in m["files"].values())
    assert len(m["tasks"]) == 8 and all(t["schedule"] == "default" for t in m["tasks"])
    assert m["records"] == {}
    assert abs(sum(t["share"] for t in m["tasks"]) - 1) < 1e-9
    # no records: the warning names the kernels and their FLOPs share
    assert any("8 of 8 kernels (100.0% of the FLOPs)" in w for w in m["warnings"])
    # parameters in their own file, named after the ONNX initializers where they are the same bytes
    # (convolution weights with their batch-norm folded in are computed at build time: "folded";
    # weights in their kernel's layout: "packed:<initializer>")
    names = [p["name"] for p in m["params"]]
    assert "conv3_bias" in names and all(p["source"].startswith(("onnx:", "folded", "packed:")) for p in m["params"])
    assert m["verification"]["fresh_process"]["ok"] and m["verification"]["layers"]["ok"]


def test_library_loads_with_plain_tvm_and_takes_inputs_then_params(cnn_bundle):
    """What the bundle's README tells a user to do, in this process."""
    import tvm
    from tvm import relax

    folder = cnn_bundle.folder
    m = read_manifest(folder)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(folder / "lib.so")), tvm.cpu())
    params = tvm.runtime.load_param_dict_from_file(str(folder / "params.bin"))
    x = np.load(folder / "inputs.npz")["input"]
    out = vm["main"](tvm.runtime.tensor(x), *[params[p["name"]] for p in m["params"]]).numpy()
    np.testing.assert_allclose(out, np.load(folder / "reference.npz")["output0"], rtol=1e-4, atol=1e-4)
    assert "run.py" in (folder / "README.md").read_text()


def test_bundle_runner_works_from_any_folder(cnn_bundle, tmp_path):
    """``python run.py`` inside a copied bundle, isolated (-I): only the bundle's files are used."""
    copy = tmp_path / "copy"
    shutil.copytree(cnn_bundle.folder, copy)
    proc = subprocess.run([sys.executable, "-I", "run.py", "--json", "--without-torch", "--runs", "3"], cwd=copy,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["check"]["verified"] and report["runs"] == 3 and report["median_s"] > 0
    assert report["foreign_modules"] == []


def test_bundle_runs_on_the_tvm_runtime_alone(cnn_bundle, tmp_path):
    """A deployment may install TVM's runtime only: with ``TVM_USE_RUNTIME_LIB=1`` TVM loads no compiler
    (``tvm.relax`` cannot even be imported then), and run.py still loads, runs and verifies the bundle."""
    import os

    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    probe = subprocess.run([sys.executable, "-c", "import tvm.base as b; print(sorted(b._LOADED_LIBS))"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "['tvm_runtime']", probe.stderr  # the compiler library is not loaded
    proc = subprocess.run([sys.executable, "run.py", "--json", "--without-torch", "--runs", "2"], cwd=cnn_bundle.folder,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["check"]["verified"]


def test_bundle_runner_uses_every_usable_core_unless_told(cnn_bundle):
    """TVM's default is half the hardware threads on x86 (one thread on a 2-core VM): run.py sets
    TVM_NUM_THREADS to the cores it may use, keeps a value the user set, and --threads wins."""
    import os

    from export.verify_bundle import usable_cores

    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    runner = [sys.executable, "-I", str(cnn_bundle.folder / "run.py"), "--json", "--without-torch"]
    for extra, user, want in (([], None, usable_cores()), ([], "1", 1), (["--threads", "3"], "1", 3)):
        proc = subprocess.run(runner + extra, env={**env, **({"TVM_NUM_THREADS": user} if user else {})},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["threads"] == str(want)
    assert "TVM_NUM_THREADS" in (cnn_bundle.folder / "README.md").read_text()


def test_bundle_runner_leaves_tvm_workers_unpinned_unless_told(cnn_bundle):
    """Pinned, TVM's workers make every parallel kernel wait for a core another process holds (a
    Whisper encoder 116 ms instead of 1.4 ms beside two busy processes: benchmarks/bench_corpus
    --busy 2): run.py, the README's loading code and schedx's own kernel processes unpin them,
    and keep a value the user set."""
    import os

    from explorer.target.environment import BIND_THREADS, threads_env

    env = {k: v for k, v in os.environ.items() if k != BIND_THREADS}
    runner = [sys.executable, "-I", str(cnn_bundle.folder / "run.py"), "--json", "--without-torch"]
    for user, want in ((None, "0"), ("1", "1")):
        proc = subprocess.run(runner, env={**env, **({BIND_THREADS: user} if user else {})}, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["bind_threads"] == want
    assert 'os.environ.setdefault("TVM_BIND_THREADS", "0")' in (cnn_bundle.folder / "README.md").read_text()
    saved = os.environ.pop(BIND_THREADS, None)
    try:
        assert threads_env()[BIND_THREADS] == "0"
        os.environ[BIND_THREADS] = "1"
        assert threads_env()[BIND_THREADS] == "1"
    finally:
        os.environ.pop(BIND_THREADS, None)
        if saved is not None:
            os.environ[BIND_THREADS] = saved


def test_the_bundle_readmes_own_code_loads_and_runs_it(cnn_bundle):
    """The "Load it yourself" code of the bundle's README, run as written in the bundle folder
    (isolated: no schedx on the path), gives the reference outputs."""
    import os
    import re

    code = re.search(r"## Load it yourself\n\n```python\n(.*?)```", (cnn_bundle.folder / "README.md").read_text(),
                     re.S).group(1)
    check = ("\nref = np.load('reference.npz')\n"
             "got = out[0] if not hasattr(out, 'numpy') else out\n"
             "np.testing.assert_allclose(got.numpy(), ref[sorted(ref.files)[0]], rtol=1e-3, atol=1e-3)\n"
             "print('threads', os.environ['TVM_NUM_THREADS'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-I", "-c", code + check], cwd=cnn_bundle.folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"threads {len(os.sched_getaffinity(0))}" in proc.stdout


def test_kernel_bundle_matches_numpy(matmul_bundle):
    v = matmul_bundle.verification
    assert v.ok and v.reference == "numpy"
    m = matmul_bundle.manifest
    assert m["workload"]["kind"] == "kernel" and m["params"] == [] and "params.bin" not in m["files"]
    assert [i["name"] for i in m["inputs"]] == ["A", "B"] and m["outputs"][0]["shape"] == [64, 48]
    assert matmul_bundle.layers is None  # no ONNX graph to compare


def _copy(bundle, tmp_path):
    folder = tmp_path / "bundle"
    shutil.copytree(bundle.folder, folder)
    return folder


@pytest.mark.parametrize("victim", ["lib.so", "params.bin", "inputs.npz"])
def test_tampered_file_is_refused_before_loading(cnn_bundle, tmp_path, victim):
    folder = _copy(cnn_bundle, tmp_path)
    data = bytearray((folder / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / victim).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=f"refused: {victim} does not match the sha256"):
        read_manifest(folder)
    # the standalone runner refuses too, without loading anything
    proc = subprocess.run([sys.executable, "-I", str(folder / "run.py"), "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "does not match the sha256" in json.loads(proc.stdout)["error"]
    with pytest.raises(BundleError, match="refused"):
        verify_folder(folder)


def test_missing_params_file_is_a_clear_error(cnn_bundle, tmp_path):
    folder = _copy(cnn_bundle, tmp_path)
    (folder / "params.bin").unlink()
    with pytest.raises(BundleError, match="parameters file params.bin is missing"):
        run_in_child(folder)


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="no manifest.json"):
        read_manifest(tmp_path)
    (tmp_path / "stuff.txt").write_text("mine")
    with pytest.raises(BundleError, match="not empty .*holds no schedx bundle"):
        export_workload("matmul:M=8,N=8,K=8", "cpu", tmp_path, verify=False)
    assert (tmp_path / "stuff.txt").read_text() == "mine"  # never deleted


def test_new_weights_need_no_recompilation(cnn_bundle, tmp_path):
    """The seed-0 library with seed-1 weights computes what ONNX Runtime computes with seed-1 weights."""
    from export.build import model_params
    from export.bundle import replace_params
    from explorer.workload import Workload
    from explorer.workload.reference import ort_session
    from explorer.models import build_onnx, import_onnx, sample_inputs

    folder = _copy(cnn_bundle, tmp_path)
    lib_hash = read_manifest(folder)["files"]["lib.so"]["sha256"]
    other = build_onnx("small_cnn", seed=1)
    loaded = import_onnx(other, name="small_cnn", origin="zoo")
    w = Workload(spec="small_cnn", kind="model", name="small_cnn", mod=loaded.mod, inputs=loaded.info.inputs,
                       outputs=loaded.info.outputs, onnx_model=loaded.onnx_model, origin="zoo")
    specs, values = model_params(w)
    manifest = replace_params(folder, [p.name for p in specs], values)
    assert manifest["files"]["lib.so"]["sha256"] == lib_hash and "reference.npz" not in manifest["files"]
    out = tmp_path / "out.npz"
    report = run_in_child(folder, out=out)
    assert "check" not in report  # the old reference no longer applies
    expected = ort_session(other).run(None, sample_inputs("small_cnn"))[0]
    np.testing.assert_allclose(np.load(out)["output0"], expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(BundleError, match="do not fit the library"):
        replace_params(folder, [p.name for p in specs][:-1], values[:-1])


def test_zip_holds_every_file(cnn_bundle):
    data = zip_bundle(cnn_bundle.folder)
    names = zipfile.ZipFile(BytesIO(data)).namelist()
    assert "small_cnn/manifest.json" in names and "small_cnn/lib.so" in names and "small_cnn/params.bin" in names


def test_workload_specs():
    assert load_workload("matmul:M=8,N=8,K=8").kind == "kernel"
    assert load_workload("small_cnn").kind == "model"
    from explorer.errors import ExplorerError

    with pytest.raises(ExplorerError):
        load_workload("no_such_model")
    with pytest.raises(ExplorerError):
        load_workload("matmul:Q=3")


def test_bundle_runs_with_only_tvm_and_numpy_importable(cnn_bundle, tmp_path):
    """A clean Python: no site-packages (-S), only apache-tvm (tvm, tvm_ffi and its typing_extensions)
    and numpy on the path. The bundle's run.py still checks, loads, runs and matches the reference."""
    import importlib.util
    from pathlib import Path

    site = tmp_path / "site"
    site.mkdir()
    for name in ("tvm", "tvm_ffi", "numpy", "typing_extensions"):
        origin = Path(importlib.util.find_spec(name).origin)
        src = origin.parent if origin.name == "__init__.py" else origin
        (site / src.name).symlink_to(src)
        libs = src.parent / f"{src.name}.libs"  # numpy's vendored shared libraries
        if libs.is_dir():
            (site / libs.name).symlink_to(libs)
    code = (f"import sys, runpy; sys.path.insert(0, {str(site)!r}); "
            f"sys.argv = ['run.py', {str(cnn_bundle.folder)!r}, '--json']; "
            f"runpy.run_path({str(cnn_bundle.folder / 'run.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["check"]["verified"] and report["foreign_modules"] == []


def test_a_model_with_a_scalar_input_runs_from_its_bundle(tmp_path):
    """Issue 27: a 0-d input became shape (1,) in run.py (np.ascontiguousarray) and TVM refused
    it ("expect Tensor with ndim 0 but get 1"), so the bundle ran nowhere."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "scaled",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "scaled.onnx")
    report = export_workload(str(tmp_path / "scaled.onnx"), "cpu", tmp_path / "bundle")
    assert report.ok and report.verification.ok, report.verification
    assert read_manifest(tmp_path / "bundle")["inputs"][1] == {"name": "s", "shape": [], "dtype": "float32"}
    child = run_in_child(tmp_path / "bundle", runs=1)
    assert child["outputs"] == [{"shape": [2, 3], "dtype": "float32"}]


def test_a_verification_without_figures_still_says_why():
    """A bundle whose outputs do not line up with its reference has no error figures to print."""
    from export.verify import Verification

    v = Verification("failed", reference="ONNX Runtime", why="2 outputs, the reference has 1")
    assert v.summary().endswith("2 outputs, the reference has 1") and v.to_dict()["ok"] is False


def test_an_export_killed_at_any_moment_leaves_the_earlier_bundle_whole(tmp_path):
    """The bundle is written and verified in a hidden sibling folder, then moved into place: a
    kill -9 after writing (held there by the fault hook) leaves the earlier bundle untouched, and
    the next export clears the dead one's leftovers."""
    import os
    import signal
    import time

    from explorer.fault_points import HOLD_VAR, MARK_VAR

    out, mark = tmp_path / "out", tmp_path / "held"
    spec = "matmul:M=8,N=8,K=8"
    first = export_workload(spec, "llvm", out, layers=False)
    before = (out / "manifest.json").read_bytes()
    env = {**os.environ, HOLD_VAR: "export.written:600", MARK_VAR: str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "export", spec, "-o", str(out), "--no-db"], env=env,
                            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 180
        while not mark.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert mark.exists(), proc.communicate()[1].decode()[-2000:]
        assert list(tmp_path.glob(".out.partial-*")), "the new bundle is written beside, not over, the old one"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (out / "manifest.json").read_bytes() == before
    assert read_manifest(out)["workload"] == first.manifest["workload"]  # every file's hash still holds
    again = export_workload(spec, "llvm", out, layers=False)
    assert again.ok and read_manifest(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held", "out"]  # no leftovers
