"""`schedx kernels` and `schedx measure`, in-process."""

from __future__ import annotations

import json

from click.testing import CliRunner

from app.cli import cli


def test_kernels_lists_builtins_with_flops():
    result = CliRunner().invoke(cli, ["kernels"])
    assert result.exit_code == 0
    assert "matmul:M=512,N=512,K=512" in result.output and "conv2d_nchw" in result.output
    data = json.loads(CliRunner().invoke(cli, ["kernels", "--json"]).output)
    assert next(k for k in data if k["name"].startswith("matmul_"))["flops"] == 2 * 512**3


def test_kernels_of_a_model():
    result = CliRunner().invoke(cli, ["kernels", "--model", "small_cnn"])
    assert result.exit_code == 0 and "small_cnn/fused_" in result.output


def test_measure_with_a_steps_file(tmp_path):
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps([{"primitive": "split", "args": {"loop": "C/i", "factors": [None, 8]}},
                                 {"primitive": "parallel", "args": {"loop": "C/i_0"}}]))
    result = CliRunner().invoke(cli, ["measure", "matmul:M=64,N=64,K=64", "--steps", str(steps), "--json",
                                      "--repeat", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["result"]["status"] == "ok" and data["result"]["verified"] is True
    assert len(data["steps"]) == 2 and data["result"]["gflops"] > 0


def test_measure_table_output():
    result = CliRunner().invoke(cli, ["measure", "matmul:M=32,N=32,K=32", "--repeat", "2"])
    assert result.exit_code == 0, result.output
    assert "GFLOPS" in result.output and "% of the measured peak" in result.output and "verified" in result.output


def test_bad_steps_file_names_the_step(tmp_path):
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps([{"primitive": "split", "args": {"loop": "C/i", "factors": [None, 8]}},
                                 {"primitive": "warp", "args": {}}]))
    result = CliRunner().invoke(cli, ["measure", "matmul:M=32,N=32,K=32", "--steps", str(steps)])
    assert result.exit_code == 1 and "step 1" in result.output and "unknown primitive 'warp'" in result.output
    assert "Traceback" not in result.output


def test_a_step_tvm_refuses_names_the_step(tmp_path):
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps([{"primitive": "vectorize", "args": {"loop": "C/k"}}]))
    result = CliRunner().invoke(cli, ["measure", "matmul:M=32,N=32,K=32", "--steps", str(steps)])
    assert result.exit_code == 1 and "step 0" in result.output and "vectorize" in result.output


def test_unknown_kernel():
    result = CliRunner().invoke(cli, ["measure", "matmal"])
    assert result.exit_code == 1 and "unknown kernel" in result.output
