"""`schedx export`, `schedx run` and `schedx bench`, in-process."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from app.cli import cli

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


def _json(result) -> dict:
    out = getattr(result, "stdout", result.output)
    return json.loads(out[out.index("{"):])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "cnn"
    result = CliRunner().invoke(cli, ["export", "small_cnn", "--target", "cpu", "-o", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    return folder, _json(result)


def test_export_json_report(exported):
    folder, data = exported
    assert data["ok"] and data["folder"] == str(folder)
    assert data["verification"]["fresh_process"]["ok"] and data["verification"]["layers"]["ok"]
    assert len(data["tasks"]) == 8 and any("have no record" in w for w in data["warnings"])
    assert (folder / "lib.so").is_file() and (folder / "params.bin").is_file()


def test_export_table_for_a_kernel(tmp_path):
    result = CliRunner().invoke(cli, ["export", "matmul:M=32,N=32,K=16", "-o", str(tmp_path / "k"), "--no-db"])
    assert result.exit_code == 0, result.output
    assert "verify: fresh process on cpu: output matches numpy" in result.output
    assert "kernels: 1, 0 from records" in result.output


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_export_cuda_without_a_gpu(tmp_path):
    result = CliRunner().invoke(cli, ["export", "matmul:M=64,N=64,K=64", "--target", "cuda:sm_90",
                                      "-o", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    assert "every PrimFunc thread-bound" in result.output and "nvcc builds it for sm_90" in result.output
    assert "gpu_check" in result.output


def test_run_reports_the_three_figures_beside_onnx_runtime(exported):
    folder, _ = exported
    result = CliRunner().invoke(cli, ["run", str(folder), "--runs", "5", "--budget", "5", "--json"])
    assert result.exit_code == 0, result.output
    data = _json(result)
    tvm_row, ort_row = data["rows"]
    assert tvm_row["name"].startswith("TVM bundle (0/8") and tvm_row["compile_s"] > 0
    assert tvm_row["first_s"] > 0 and tvm_row["median_s"] > 0 and tvm_row["p90_s"] >= tvm_row["median_s"]
    assert ort_row["name"] == "onnxruntime" and ort_row["runs"] >= 5 and ort_row["rounds"] == 3  # alternated
    assert tvm_row["ci_low_s"] <= tvm_row["median_s"] <= tvm_row["ci_high_s"]
    assert [(c["a"], c["b"]) for c in data["comparisons"]] == [(tvm_row["name"], "onnxruntime")]
    assert data["check"]["verified"] and data["threads"] >= 1
    table = CliRunner().invoke(cli, ["run", str(folder), "--runs", "3", "--budget", "2", "--threads", "1"])
    assert table.exit_code == 0 and "median ms" in table.output and "1 thread(s)" in table.output


def test_bench_side_by_side():
    result = CliRunner().invoke(cli, ["bench", "small_cnn", "--runs", "3", "--budget", "2", "--no-db"])
    assert result.exit_code == 0, result.output
    assert "tvm default" in result.output and "onnxruntime" in result.output
    assert "tvm tuned: no records" in result.output and "PyTorch: skipped" in result.output
    assert "95% CI" in result.output and "3 alternated rounds" in result.output
    # the default build against ONNX Runtime, decided under the noise: faster, slower or no difference
    assert any(line.startswith("tvm default ") and "onnxruntime" in line and "(ratio" in line
               for line in result.output.splitlines())


@pytest.mark.parametrize("args, words", [
    (["export", "small_cnn", "--target", "cuda:sm_99", "-o", "{tmp}/x"], "unknown CUDA architecture 'sm_99'"),
    (["export", "small_cnn", "--target", "gpu", "-o", "{tmp}/x"], "unknown target 'gpu'"),
    (["export", "small_cnn", "--target", "cpu:nocpu", "-o", "{tmp}/x"], "LLVM does not know the CPU"),
    (["export", "small_cnn", "--db", "{tmp}/none.db", "-o", "{tmp}/x"], "no database at"),
    (["export", "nosuchmodel", "-o", "{tmp}/x"], "cannot tell what model"),
    (["run", "{tmp}"], "no manifest.json"),
])
def test_bad_input_is_one_line(tmp_path, args, words):
    result = CliRunner().invoke(cli, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 1 and words in result.output and "Traceback" not in result.output


def test_run_refuses_a_tampered_bundle(exported, tmp_path):
    folder, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    with open(copy / "lib.so", "ab") as f:
        f.write(b"\0")
    result = CliRunner().invoke(cli, ["run", str(copy)])
    assert result.exit_code == 1 and "refused: lib.so does not match the sha256" in result.output
    (copy / "lib.so").write_bytes((folder / "lib.so").read_bytes())
    (copy / "params.bin").unlink()
    result = CliRunner().invoke(cli, ["run", str(copy)])
    assert result.exit_code == 1 and "parameters file params.bin is missing" in result.output


def test_commands_have_help():
    for name in ("export", "run", "bench"):
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "--json" in result.output
