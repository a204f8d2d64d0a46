"""``--precision bf16`` as a property of a build: a model's weight products rewritten into bf16
kernels (the rest in fp32), refused where the target has no bf16 instructions, and a bf16
bundle verified against ONNX Runtime fp32 at the tolerance its manifest states."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

from explorer.passes.bf16_dense import bf16_products
from explorer.precision import BF16_TOLERANCE, PrecisionError, check_precision
from explorer.target import parse_target
from explorer.workload import load_workload
from export.errors import ExportError
from tests.bf16_models import bf16_mlp, mlp_path  # noqa: F401 - mlp_path: the fixture
from tests.cpu_marks import HAS_BF16


def _asm(built) -> str:
    return "".join(m.inspect_source("asm") for m in built.executable.mod.imports)


def test_weight_products_become_bf16_kernels_and_the_rest_stays_fp32(mlp_path):
    mod, converted, _ = bf16_products(load_workload(mlp_path).mod)
    text = mod.script()
    assert converted == 2 and "R.matmul" not in text and text.count("dense_bf16") >= 2
    assert "softmax" in text and '"uint16"' in text  # softmax untouched; weights stored as bf16 bits


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cuda"])
def test_bf16_is_refused_for_a_target_without_bf16_instructions(spec):
    with pytest.raises(PrecisionError, match="AVX512-BF16"):
        check_precision("bf16", parse_target(spec))


def test_bf16_of_a_single_kernel_is_refused_with_the_reason(tmp_path):
    from export.flow import export_workload

    with pytest.raises(ExportError, match="single kernel"):
        export_workload("matmul:M=16,N=16,K=16", "cpu:znver4", tmp_path / "b", precision="bf16", verify=False)


def test_export_cli_refuses_bf16_on_an_avx2_target(mlp_path, tmp_path):
    from app.cli import cli

    result = CliRunner().invoke(cli, ["export", mlp_path, "--target", "cpu:x86-64-v3", "-o", str(tmp_path / "b"),
                                      "--precision", "bf16"])
    assert result.exit_code != 0 and "AVX512-BF16" in result.output


# AMX tiles take both products; vdpbf16ps only the one of few rows by many weights (8 x 256 -> 256), the
# classifier's 40 outputs stay fp32 and the build says so (explorer.passes.bf16_dense.why_fp32)
@pytest.mark.parametrize("spec, instruction, shape, converted",
                         [("cpu:znver4", "vdpbf16ps", (1, 8, 256, 256), 1),
                          ("cpu:sapphirerapids", "tdpbf16ps", (2, 16, 64, 96), 2)])
def test_bf16_model_builds_with_the_targets_bf16_instruction(tmp_path, spec, instruction, shape, converted):
    from export.build import build

    path = tmp_path / "mlp.onnx"
    onnx.save(bf16_mlp(*shape), path)
    built = build(load_workload(str(path)), parse_target(spec), precision="bf16")
    assert instruction in _asm(built) and built.precision.name == "bf16"
    assert built.precision.converted == converted
    kept = [line for line in built.precision.kept_fp32 if "weight product(s)" in line]
    assert kept == ([] if converted == 2 else ["1 weight product(s) where bf16 does not pay on the target's "
                                               "vdpbf16ps (rows x K -> N): 8x256 -> 40"])


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the bf16 "
                                         "bundle cannot run here")
def test_bf16_bundle_verifies_against_onnx_runtime_fp32_at_the_stated_tolerance(mlp_path, tmp_path):
    from export.flow import export_workload

    report = export_workload(mlp_path, "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    assert report.manifest["tolerance"] == BF16_TOLERANCE
    assert report.manifest["precision"]["name"] == "bf16" and "softmax" in report.manifest["precision"]["kept_fp32"]
    assert "1e-02 x max |ref|" in report.verdict  # the rule it was held to is said, not fp32's


def test_profile_cli_takes_a_precision_and_refuses_bf16_on_an_avx2_target(mlp_path):
    from app.cli import cli

    result = CliRunner().invoke(cli, ["profile", mlp_path, "--target", "cpu:x86-64-v3", "--no-db", "--precision", "bf16"])
    assert result.exit_code != 0 and "AVX512-BF16" in result.output, result.output


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 nor AMX-BF16: a bf16 profile cannot run here")
def test_a_bf16_profile_suggests_searching_the_model_at_bf16_not_a_kernel_of_the_float_model(mlp_path):
    """The bf16 kernels exist only in the model as rewritten; ``schedx tune MODEL/kernel`` would name
    a kernel the float model has not, so the profile suggests the model's search at bf16."""
    from app.cli import cli

    result = CliRunner().invoke(cli, ["profile", mlp_path, "--no-db", "--precision", "bf16", "--runs", "5"])
    assert result.exit_code == 0, result.output
    tune = [line for line in result.output.splitlines() if "schedx tune" in line]
    assert tune and all("--precision bf16" in line and f"{mlp_path}/" not in line for line in tune), tune
