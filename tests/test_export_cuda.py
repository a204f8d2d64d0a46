"""CUDA export with no GPU here: the kernels are there, every PrimFunc is thread-bound, nvcc
compiles the source for the chosen architecture, and the bundle carries what a GPU machine needs."""

from __future__ import annotations

import shutil

import pytest

from explorer.target import parse_target
from explorer.workload import load_workload
from export import export_workload
from export.build import build
from explorer.target.cuda_check import check_cuda, is_thread_bound, unbound_prim_funcs

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@pytest.fixture(scope="module")
def cuda_bundle(tmp_path_factory):
    return export_workload("small_cnn", "cuda:sm_90", tmp_path_factory.mktemp("cuda") / "b",
                           nvcc=shutil.which("nvcc") is not None)


def test_every_prim_func_is_bound_and_has_a_kernel(cuda_bundle):
    c = cuda_bundle.cuda
    assert c.arch == "sm_90" and c.prim_funcs == 9
    assert c.unbound == () and c.missing_kernels == ()
    assert len(c.kernels) >= c.prim_funcs and c.source_bytes > 10_000
    v = cuda_bundle.verification
    if not __import__("tvm").cuda(0).exist:  # no GPU here: nothing runs, and the verdict says so
        assert v.status == "skipped" and "no CUDA GPU" in v.why and "gpu_check" in v.why
        assert cuda_bundle.ok and not cuda_bundle.verified and "not run here" in cuda_bundle.verdict
    assert cuda_bundle.layers.ok  # the layer check runs on the CPU whatever the target


@needs_nvcc
def test_nvcc_compiles_the_kernels_for_the_arch(cuda_bundle):
    c = cuda_bundle.cuda
    assert c.nvcc == "ok", c.nvcc_error
    assert c.cubin_bytes > 0 and cuda_bundle.ok
    files = cuda_bundle.manifest["files"]
    assert files["kernels.cu"]["role"] == "cuda-source" and files["kernels_sm_90.cubin"]["role"] == "cubin"
    assert cuda_bundle.manifest["target"]["host"] == {"kind": "llvm"}


@needs_nvcc
def test_the_bundle_loads_its_own_cubin_on_its_arch_and_compiles_the_source_elsewhere(cuda_bundle, monkeypatch):
    """What TVM's CUDA runtime gets when the library loads (run.py's ``tvm_callback_cuda_compile``):
    on a GPU of the bundle's architecture the cubin built at export, no compiler and no TVM compiler
    needed (TVM's own callback asks the compiler for the target: a runtime-only TVM failed there, seen
    on an H200); on another GPU, or for a source that is not the bundle's, the source compiled for it."""
    from export.verify_bundle import check_bundle, cuda_code_loader

    folder = cuda_bundle.folder
    manifest = check_bundle(folder)
    source = (folder / "kernels.cu").read_bytes().decode()
    shipped = (folder / "kernels_sm_90.cubin").read_bytes()
    used: list[str] = []
    assert cuda_code_loader(folder, manifest, used, arch="sm_90")(source) == shipped
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    other = cuda_code_loader(folder, manifest, used, arch="sm_80")(source)
    edited = cuda_code_loader(folder, manifest, used, arch="sm_90")(source + "\n// edited\n")
    assert other[:4] == edited[:4] == b"\x7fELF" and other != shipped
    assert "kernels_sm_90.cubin" in used[0] and "compiled here for sm_80 with nvcc" in used[1]
    assert "compiled here for sm_90" in used[2]


def test_dlight_defaults_are_named_in_the_warning(cuda_bundle):
    assert any("dlight's default GPU schedules" in w for w in cuda_bundle.warnings)


def test_unscheduled_prim_funcs_are_caught():
    """A CPU build leaves every PrimFunc as a plain loop nest: for CUDA each would be host code."""
    built = build(load_workload("matmul:M=32,N=32,K=32"), parse_target("cpu"))
    assert unbound_prim_funcs(built.lowered) == ["matmul_M32_N32_K32_float32"]
    cuda = build(load_workload("matmul:M=32,N=32,K=32"), parse_target("cuda:sm_80"))
    assert unbound_prim_funcs(cuda.lowered) == []
    assert all(is_thread_bound(f) for f in cuda.lowered.functions.values() if hasattr(f, "buffer_map"))


@needs_nvcc
def test_nvcc_failure_is_reported_not_raised():
    built = build(load_workload("matmul:M=32,N=32,K=32"), parse_target("cuda:sm_80"))

    class Broken:  # an executable whose CUDA source does not compile
        kind, imports = "cuda", []

        def inspect_source(self, fmt):
            return 'extern "C" __global__ void matmul_M32_N32_K32_float32_kernel(float* a) { this is not C; }'

    check, _, cubin = check_cuda(built.lowered, Broken(), parse_target("cuda:sm_80").tvm())
    assert check.nvcc == "failed" and not check.ok and cubin == b"" and check.nvcc_error


def test_cuda_bundle_cannot_run_here_and_says_so(cuda_bundle):
    import tvm

    from export import BundleError
    from export.verify import run_in_child

    if tvm.cuda(0).exist:
        pytest.skip("a GPU is visible: tests/test_export_gpu.py runs the bundle")
    with pytest.raises(BundleError, match="no CUDA device"):
        run_in_child(cuda_bundle.folder)


def test_a_dlight_rule_that_raises_on_a_kernel_falls_back_to_the_next_and_is_named(monkeypatch):
    """Issue 27: dlight's GEMV rule raised `AttributeError: 'Add' object has no attribute 'value'` on
    a fused detector kernel for cuda:sm_90 and the whole export was lost with no kernel named. A
    rule that raises is passed over for that kernel (the next one schedules it), and a warning names
    the kernel, the rule and the error."""
    from tvm.s_tir import dlight as dl

    def broken(self, func, target, tunable):
        raise AttributeError("'Add' object has no attribute 'value'")

    monkeypatch.setattr(dl.gpu.Matmul, "apply", broken)
    built = build(load_workload("matmul:M=32,N=32,K=32"), parse_target("cuda:sm_90"))
    assert unbound_prim_funcs(built.lowered) == []  # still thread-bound: a later rule scheduled it
    note = next(w for w in built.warnings if "failed" in w)
    assert "kernel matmul_M32_N32_K32_float32" in note and "Matmul (AttributeError: 'Add' object" in note, note
    assert "scheduled it instead" in note


def test_an_export_that_skips_nvcc_is_not_called_failed(tmp_path):
    """`--no-nvcc` (or no nvcc on the machine) leaves the cubin out; nothing failed, so the verdict
    says what ran instead of NOT VERIFIED."""
    from export import export_workload

    report = export_workload("matmul:M=16,N=16,K=16", "cuda:sm_80", tmp_path / "b", nvcc=False, layers=False)
    assert report.cuda.nvcc == "not run" and report.ok
    assert "NOT VERIFIED" not in report.verdict and "nvcc not run" in report.cuda.summary()


def test_a_dlight_schedule_that_does_not_build_falls_back_to_the_next_rule():
    """dlight's Reduction rule schedules ShuffleNet v1's grouped 1x1 conv (7x7x544, groups of 136)
    into a cross-thread reduction that TVM's lowering refuses ("Cross-thread reduction requires all
    the reduction-related loops to be the deepest"): the export was lost. The kernel is built alone
    after each rule; one that does not build passes to the next rule, named in the note."""
    import tvm
    from tvm import te, topi

    from explorer.schedule.defaults.gpu import apply_gpu_defaults

    x = te.placeholder((1, 7, 7, 544), name="x")
    w = te.placeholder((1, 1, 136, 544), name="w")
    b = te.placeholder((1, 1, 1, 544), name="b")
    y = topi.nn.relu(topi.nn.group_conv2d_nhwc(x, w, 1, 0, 1, 4) + b)
    target = parse_target("cuda:sm_80").tvm()
    mod, notes = apply_gpu_defaults(tvm.IRModule({"main": te.create_prim_func([x, w, b, y])}), target)
    assert any("Reduction (its schedule does not build" in n and "scheduled it instead" in n for n in notes), notes
    tvm.compile(mod, target=target)  # the rule that scheduled it instead builds
    assert unbound_prim_funcs(mod) == []


@needs_nvcc
def test_a_model_input_named_like_a_path_compiles_with_nvcc(tmp_path):
    """The `onnx` package's ZFNet and ShuffleNet name their input ``gpu_0/data_0``; TVM named a
    kernel parameter after it and nvcc refused the CUDA source (``gpu_0/data_0_ptr``). The Relax
    parameter gets a C name; the user still feeds ``gpu_0/data_0``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["gpu_0/data_0"], ["t"], perm=[0, 1, 3, 2]),
         helper.make_node("Conv", ["t", "w"], ["out"], pads=[1, 1, 1, 1])], "slash",
        [helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    path = tmp_path / "slash.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    workload = load_workload(str(path))
    assert [name for name, *_ in workload.inputs] == ["gpu_0/data_0"]
    report = export_workload(workload, "cuda:sm_80", tmp_path / "b", nvcc=True, layers=False)
    assert report.cuda.nvcc == "ok", report.cuda.nvcc_error
    assert report.ok, report.verdict
