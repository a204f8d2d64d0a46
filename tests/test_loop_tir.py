"""A kept ``while`` loop (a condition computed from the data, :mod:`explorer.models.loop_relax`)
whose body is straight-line kernels is built for a CPU as one PrimFunc with a TIR ``while``
(:mod:`explorer.models.loop_tir`): no recursive loop function is left in what is compiled, it
agrees with ONNX Runtime on 0, 1 and many turns, and past the turn limit it stops with the same
error as the recursive form. A body that keeps an ``If`` keeps the recursive form, and agrees too."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

from explorer.models.loop_relax import MAX_KEPT_TURNS
from tests.onnx_cases import ort_run

torch = pytest.importorskip("torch")
nn = torch.nn


class _HalveWhileLarge(nn.Module):
    """``while a and b``: scripted PyTorch computes the next condition in an ``If`` (short-circuit)."""

    def forward(self, x: torch.Tensor):
        i = 0
        while bool(x.abs().max() > 1.0) and i < 40:
            x = x * 0.5
            i += 1
        return x


class _Shrink(nn.Module):
    def forward(self, x: torch.Tensor):
        while bool(x.abs().max() > 1.0):
            x = x * 0.99
        return x


class _Settle(nn.Module):
    """A fixed-point iteration reading a value from outside the loop (``y``) and weights."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        h = x
        d = torch.ones_like(x)
        while bool(d.abs().max() > 1e-4):
            n = 0.3 * torch.tanh(self.lin(h)) + y
            d = n - h
            h = n
        return h


class _DivideOrHalve(nn.Module):
    """A body whose ``If`` divides in one branch: not computed ahead, so the loop stays recursive."""

    def forward(self, x: torch.Tensor):
        while bool(x.abs().max() > 1.0):
            if bool(x.sum() > 0.0):
                x = x / 3.0
            else:
                x = x * 0.5
        return x


def _built(module: nn.Module, tmp_path, names=("x",)):
    """The scripted ``module`` (inputs ``names``, each 2x3) exported to ONNX, built as ``schedx
    export`` builds it for this CPU, and a function running the build on the inputs."""
    from explorer.target import host_target
    from explorer.workload import load_workload
    from export.build import build

    buf = io.BytesIO()
    torch.onnx.export(torch.jit.script(module.eval()), tuple(torch.randn(2, 3) for _ in names), buf,
                      input_names=list(names), opset_version=17, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    path = tmp_path / "loop.onnx"
    onnx.save(model, str(path))
    built = build(load_workload(str(path), ",".join(f"{n}:2x3" for n in names)), host_target())
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    params = [tvm.runtime.tensor(v) for v in built.param_values]

    def run(*inputs: np.ndarray) -> np.ndarray:
        return vm["main"](*(tvm.runtime.tensor(x) for x in inputs), *params).numpy()
    return model, built.lowered, run


def _names(mod: tvm.IRModule) -> list[str]:
    return [gv.name_hint for gv in mod.get_global_vars()]


def _turns(x: np.ndarray, factor: float, limit: int = 10**9) -> int:
    turns = 0
    while np.abs(x).max() > 1.0 and turns < limit:
        x, turns = x * np.float32(factor), turns + 1
    return turns


def test_a_while_loop_of_kernels_is_one_tir_while_and_agrees_on_0_1_and_many_turns(tmp_path):
    model, lowered, run = _built(_HalveWhileLarge(), tmp_path)
    names = _names(lowered)
    assert any(n.endswith("_while") for n in names), names
    assert not any(n.endswith(("_loop", "_body")) for n in names), names
    base = np.array([[0.9, -0.5, 0.3], [0.2, -0.95, 0.1]], np.float32)
    for scale, turns in ((1.0, 0), (2.0, 1), (1000.0, 10), (1e20, 40)):  # the last stopped by ``i < 40``
        x = base * np.float32(scale)
        assert _turns(x, 0.5, 40) == turns
        np.testing.assert_array_equal(run(x), ort_run(model, {"x": x})[0])


def test_a_tir_while_past_its_turn_limit_stops_with_the_recursive_forms_error(tmp_path):
    model, lowered, run = _built(_Shrink(), tmp_path)
    assert any(n.endswith("_while") for n in _names(lowered))
    near = np.full((2, 3), 0.99 ** -(MAX_KEPT_TURNS - 10), np.float32)  # about 990 turns
    assert MAX_KEPT_TURNS - 20 < _turns(near, 0.99) <= MAX_KEPT_TURNS
    np.testing.assert_allclose(run(near), ort_run(model, {"x": near})[0], rtol=1e-6)
    with pytest.raises(Exception, match=f"ran past {MAX_KEPT_TURNS} turns"):
        run(np.full((2, 3), 1e6, np.float32))  # about 1375 turns


def test_a_tir_while_reads_values_from_outside_the_loop_and_weights(tmp_path):
    model, lowered, run = _built(_Settle(), tmp_path, ("x", "y"))
    assert any(n.endswith("_while") for n in _names(lowered))
    rng = np.random.default_rng(0)
    for scale in (0.0, 1.0, 10.0):
        x, y = (rng.standard_normal((2, 3)) * scale).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(run(x, y), ort_run(model, {"x": x, "y": y})[0], rtol=1e-5, atol=1e-6)


def test_a_body_that_keeps_an_if_keeps_the_recursive_loop_and_agrees(tmp_path):
    model, lowered, run = _built(_DivideOrHalve(), tmp_path)
    names = _names(lowered)
    assert any(n.endswith("_loop") for n in names) and not any(n.endswith("_while") for n in names), names
    for x in (np.full((2, 3), 0.5, np.float32), np.full((2, 3), 50.0, np.float32),
              np.full((2, 3), -50.0, np.float32)):
        np.testing.assert_allclose(run(x), ort_run(model, {"x": x})[0], rtol=1e-6)


def test_profile_of_a_model_whose_only_kernel_is_the_loop_prints_its_table(tmp_path):
    """The loop runs as one kernel that is no tuning task: every task's row is below the timer (or
    did not run), so the kernels' time is 0; the profile still prints, with no share of a 0 total."""
    from click.testing import CliRunner

    from app.cli import cli

    model, _, _ = _built(_HalveWhileLarge(), tmp_path)
    path = tmp_path / "loop.onnx"
    out = CliRunner().invoke(cli, ["profile", str(path), "--shapes", "x:2x3", "--no-db", "--runs", "5"])
    assert out.exit_code == 0, out.output
    assert "ms per run" in out.output and "ZeroDivisionError" not in out.output
