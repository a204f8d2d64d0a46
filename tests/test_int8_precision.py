"""``--precision int8`` (issue 51, item 3): export, bench, profile and tune quantize a float model by
``schedx quantize``'s flow (cached by content: the next command reuses it), then build it as that
QDQ model is built; the verdict is against ONNX Runtime running the int8 model, the quantizer's
own figures against the float model beside it. Refused with the reason for a single kernel, a
model that did not come from ONNX and a model already quantized."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.models.int8_precision import cache_dir
from explorer.precision import Calibration, PrecisionError, for_precision
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.conftest import tiny_cnn


@pytest.fixture
def float_model(tmp_path, monkeypatch):
    """A tiny float CNN on disk, and a private cache folder for its quantized model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), path)
    return str(path)


def _schedx(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_export_int8_builds_int8_kernels_verifies_and_says_what_quantizing_cost(float_model, tmp_path):
    result = _schedx("export", float_model, "--precision", "int8", "--calibrate", "2", "--no-db",
                     "-o", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    assert "verdict: verified" in result.output
    assert "against ONNX Runtime running the int8 model" in result.output  # what the verdict is against
    assert "calibrated on 2 random sample(s)" in result.output and "top-1 agrees on" in result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    quantization = manifest["precision"]["quantization"]
    assert manifest["precision"]["name"] == "int8" and quantization["calibration_samples"] == 2
    assert quantization["from"] == float_model and quantization["cached"] is False
    names = [t["name"] for t in manifest["tasks"]]
    assert any("conv2d_nhwc_int8" in n for n in names) and any("dense_int8" in n for n in names), names
    assert manifest["workload"]["name"] == "tiny.int8" and "output_atol" in manifest  # judged as a QDQ model is
    assert len(list(cache_dir().glob("*/tiny.int8.onnx"))) == 1


def test_bench_int8_reuses_the_quantized_model_and_prints_the_int8_rows(float_model, tmp_path):
    export = _schedx("export", float_model, "--precision", "int8", "--calibrate", "2", "--no-db", "--no-verify",
                     "-o", str(tmp_path / "b"))
    assert export.exit_code == 0, export.output
    result = _schedx("bench", float_model, "--precision", "int8", "--calibrate", "2", "--no-db", "--runs", "3",
                     "--rounds", "1", "--budget", "2")
    assert result.exit_code == 0, result.output
    rows = {line.split("  ")[0].strip() for line in result.output.splitlines()}
    assert {"tvm default", "tvm default int8", "onnxruntime", "onnxruntime int8"} <= rows, result.output
    assert "reused from the cache" in result.output  # quantized once, by the export
    assert any(line.startswith("tvm default int8 ") and line.rstrip().endswith(")") and "onnxruntime int8" in line
               for line in result.output.splitlines()), result.output  # the int8 build compared with ORT's int8
    assert len(list(cache_dir().glob("*/tiny.int8.onnx"))) == 1
    other = _schedx("bench", float_model, "--precision", "int8", "--calibrate", "3", "--no-db", "--runs", "3",
                    "--rounds", "1", "--budget", "1")
    assert other.exit_code == 0 and "calibrated on 3" in other.output and "reused" not in other.output
    assert len(list(cache_dir().glob("*/tiny.int8.onnx"))) == 2  # other settings, another model


def test_int8_of_a_single_kernel_is_refused_with_the_reason(tmp_path):
    result = _schedx("export", "matmul:M=16,N=16,K=16", "--precision", "int8", "-o", str(tmp_path / "b"))
    assert result.exit_code != 0 and "single kernel" in result.output, result.output
    tune = _schedx("tune", "matmul:M=16,N=16,K=16", "--precision", "int8", "--trials", "1", "--db",
                   str(tmp_path / "s.db"))
    assert tune.exit_code != 0 and "quantizes models" in tune.output, tune.output


def test_int8_of_a_model_already_quantized_says_to_export_it_as_it_is(float_model, tmp_path):
    from explorer.models.quantize import quantize_model

    qdq = tmp_path / "q.onnx"
    quantize_model(float_model, calibrate=2, eval_samples=1, runs=1, budget_s=0.1, output=qdq)
    for command in (["export", str(qdq), "-o", str(tmp_path / "b")], ["bench", str(qdq)], ["profile", str(qdq)]):
        result = _schedx(*command, "--precision", "int8", "--no-db")
        assert result.exit_code != 0, result.output
        assert "already quantized" in result.output and "export it as it is" in result.output, result.output


def test_int8_of_a_pytorch_module_is_refused_it_needs_onnx():
    torch = pytest.importorskip("torch")
    from explorer.models import import_torch
    from explorer.workload import Workload

    loaded = import_torch(torch.nn.Linear(8, 4), [torch.randn(2, 8)], name="linear")
    workload = Workload(spec="linear", kind="model", name="linear", mod=loaded.mod, inputs=loaded.info.inputs,
                        outputs=loaded.info.outputs, origin="torch")
    with pytest.raises(PrecisionError, match="takes an ONNX model.*torch.onnx.export"):
        for_precision(workload, parse_target("cpu"), "int8")


def test_calibration_options_need_int8(float_model, tmp_path):
    result = _schedx("export", float_model, "--calibrate", "4", "-o", str(tmp_path / "b"))
    assert result.exit_code != 0 and "add --precision int8" in result.output, result.output


def test_an_int8_search_spec_searches_the_int8_kernels_and_keeps_its_calibration(float_model):
    from search.job_spec import JobSpec

    spec = JobSpec(float_model, precision="int8", calibration=Calibration(samples=2))
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec  # a background job reads it back
    job = spec.validate()
    assert any("int8" in t.name for t in job.tasks) and job.source == "model:tiny.int8"


def test_a_workload_is_made_at_its_precision_once(float_model):
    target = parse_target("cpu")
    built, precision = for_precision(load_workload(float_model), target, "int8", Calibration(samples=2))
    again, same = for_precision(built, target, "int8")
    assert again is built and same is precision and precision.quantization["quantized_nodes"] > 0
    with pytest.raises(PrecisionError, match="already built at int8"):
        for_precision(built, target, "bf16")


@pytest.mark.parametrize("precision, module, function", [("bf16", "explorer.precision", "bf16_module"),
                                                         ("int8", "explorer.models.int8_precision", "int8_workload")])
def test_an_export_makes_the_model_at_its_precision_once(float_model, tmp_path, monkeypatch, precision, module,
                                                         function):
    """The records' chooser and the build take the one workload made at the precision (before: a
    bf16 model was rewritten by the chooser, then again by the build)."""
    import importlib

    from export.entry import ExportSpec, run_export

    owner = importlib.import_module(module)
    real, calls = getattr(owner, function), []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, function, counted)
    target = "cpu:sapphirerapids" if precision == "bf16" else "cpu"  # (built, not run: no bf16 CPU needed)
    result = run_export(ExportSpec(workload=float_model, out_dir=tmp_path / "b", target=target, precision=precision,
                                   use_records=False, verify=False, layers=False))
    assert result.report.manifest["precision"]["name"] == precision and len(calls) == 1


def test_export_int8_for_cuda_keeps_the_qdq_model_in_float_and_says_so(float_model, tmp_path):
    # no int8 kernels for a device (QDQToInt8Kernels rewrites for a CPU's dot-product instructions):
    # the bundle computes every conv and matmul in float between dequantize and quantize, as it says
    result = _schedx("export", float_model, "--precision", "int8", "--calibrate", "2", "--no-db", "--no-nvcc",
                     "--target", "cuda:sm_80", "-o", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    kept = manifest["precision"]["kept_fp32"]
    assert any("every convolution and matmul" in k and "cuda:sm_80" in k for k in kept), kept
    names = [t["name"] for t in manifest["tasks"]]
    assert any("conv2d" in n for n in names) and not any("conv2d_nhwc_int8" in n or "dense_int8" in n for n in names)
    host = for_precision(load_workload(float_model), parse_target("cpu"), "int8", Calibration(samples=2))[1]
    assert not any("every convolution" in k for k in host.kept_fp32)  # this CPU has int8 kernels
