"""PyTorch beyond ``torch.onnx.export`` of a static module: scripted control flow, the dynamo
exporter, dynamic axes, old and new opsets.

- ``torch.jit.script``ed modules exported by the TorchScript exporter keep Python control flow as
  ONNX ``If`` and ``Loop``: a voice-activity model in the manner of silero-vad (a branch on a 0-d
  int64 sample rate, each branch an encoder and an LSTM cell over a recurrent state input), a GRU
  cell looped over the time steps (trip count = the sequence length, symbolic), a decoder looped
  ``n`` times where ``n`` is an input (a data-dependent trip count) and a ``while`` loop that halves
  a tensor until it is small (a data-dependent condition);
- the dynamo exporter (``torch.onnx.export(..., dynamo=True)``, onnxscript) with dynamic batch or
  sequence dimensions;
- the TorchScript exporter with dynamic axes on batch and sequence at opsets 9, 11, 13, 17 and 20.

Random weights, seeded. Run: ``python -m benchmarks.exporters.torch_script OUTDIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.exporters import Model, build_each, main

EXPORTER = "torch.onnx"
REQUIREMENTS: tuple[str, ...] = ()  # the project's .venv: torch, onnxscript
SEED = 0


def _scripted():
    import torch
    from torch import nn

    class Vad(nn.Module):
        """silero-vad's shape: a branch per sample rate, an LSTM cell carrying ``state`` (2, 1, 64)."""

        def __init__(self):
            super().__init__()
            self.enc16 = nn.Conv1d(1, 32, 16, stride=8)
            self.enc8 = nn.Conv1d(1, 32, 8, stride=4)
            self.cell16 = nn.LSTMCell(32, 64)
            self.cell8 = nn.LSTMCell(32, 64)
            self.out = nn.Linear(64, 1)

        def forward(self, x: torch.Tensor, state: torch.Tensor, sr: torch.Tensor):
            if sr == 16000:
                feats = torch.relu(self.enc16(x.unsqueeze(1))).mean(-1)
                h, c = self.cell16(feats, (state[0], state[1]))
            else:
                feats = torch.relu(self.enc8(x.unsqueeze(1))).mean(-1)
                h, c = self.cell8(feats, (state[0], state[1]))
            return torch.sigmoid(self.out(h)), torch.stack([h, c])

    class GruLoop(nn.Module):
        """A one-step GRU layer run over the sequence in a scripted loop: ``Loop`` over ``x.size(0)``
        around an ONNX ``GRU``, the hidden state carried (``h0`` an input)."""

        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(16, 32)
            self.out = nn.Linear(32, 4)

        def forward(self, x: torch.Tensor, h: torch.Tensor):
            outs = []
            for t in range(x.size(0)):
                y, h = self.gru(x[t:t + 1], h)
                outs.append(self.out(y[0]))
            return torch.stack(outs)

    class StepsLoop(nn.Module):
        """A decoder run ``steps`` times, ``steps`` an int64 input: the trip count is data."""

        def __init__(self):
            super().__init__()
            self.cell = nn.LSTMCell(8, 8)

        def forward(self, x: torch.Tensor, steps: torch.Tensor):
            h = torch.zeros_like(x)
            c = torch.zeros_like(x)
            for _ in range(int(steps)):
                h, c = self.cell(x, (h, c))
                x = torch.tanh(h)
            return x

    class Converge(nn.Module):
        """A ``while`` loop whose condition is computed from the data (at most 32 turns)."""

        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor):
            y = self.proj(x)
            i = 0
            while bool(y.abs().max() > 1.0) and i < 32:
                y = y * 0.5
                i += 1
            return y

    return Vad, GruLoop, StepsLoop, Converge


def _export(module, args, path: Path, names: list[str], outputs: list[str], *, opset: int,
            dynamic: dict | None = None) -> None:
    import torch

    torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                      opset_version=opset, dynamic_axes=dynamic, dynamo=False)


def vad(opset: int):
    def make(path: Path) -> None:
        import torch

        torch.manual_seed(SEED)
        module = torch.jit.script(_scripted()[0]().eval())
        args = (torch.randn(1, 512), torch.zeros(2, 1, 64), torch.tensor(16000))
        _export(module, args, path, ["input", "state", "sr"], ["prob", "new_state"], opset=opset,
                dynamic={"input": {0: "batch", 1: "samples"}, "state": {1: "batch"}})
    return make


def gru_loop(opset: int):
    def make(path: Path) -> None:
        import torch

        torch.manual_seed(SEED)
        module = torch.jit.script(_scripted()[1]().eval())
        _export(module, (torch.randn(10, 1, 16), torch.zeros(1, 1, 32)), path, ["x", "h0"], ["y"], opset=opset,
                dynamic={"x": {0: "time", 1: "batch"}, "h0": {1: "batch"}})
    return make


def steps_loop(path: Path) -> None:
    import torch

    torch.manual_seed(SEED)
    module = torch.jit.script(_scripted()[2]().eval())
    _export(module, (torch.randn(1, 8), torch.tensor(5)), path, ["x", "steps"], ["y"], opset=17)


def converge(path: Path) -> None:
    import torch

    torch.manual_seed(SEED)
    module = torch.jit.script(_scripted()[3]().eval())
    _export(module, (torch.randn(2, 16),), path, ["x"], ["y"], opset=17)


def _float_module(name: str):
    import torch

    from benchmarks.exporters.ort_quant import FLOAT_INPUTS, float_modules

    torch.manual_seed(SEED)
    input_name, shape = FLOAT_INPUTS[name]
    return float_modules()[name]().eval(), input_name, shape


def dynamic_axes(name: str, opset: int, axes: dict[int, str]):
    """An :mod:`ort_quant` float model by the TorchScript exporter with ``axes`` symbolic."""
    def make(path: Path) -> None:
        import torch

        module, input_name, shape = _float_module(name)
        _export(module, (torch.randn(*shape),), path, [input_name], ["output"], opset=opset,
                dynamic={input_name: axes, "output": {0: axes.get(0, "batch")}})
    return make


def dynamo(name: str, axes: dict[int, str]):
    """An :mod:`ort_quant` float model by the dynamo exporter with ``axes`` dynamic."""
    def make(path: Path) -> None:
        import torch
        from torch.export import Dim

        module, input_name, shape = _float_module(name)
        dims = {k: Dim(v, min=1 if k == 0 else 2, max=64 if k == 0 else 512) for k, v in axes.items()}
        program = torch.onnx.export(module, (torch.randn(*shape),), input_names=[input_name],
                                    dynamic_shapes=(dims,),
                                    dynamo=True, optimize=True)
        program.save(str(path))
    return make


def models() -> list[Model]:
    vad_shapes = "input:1x512,state:2x1x64,sr=16000"
    out = [Model(f"ts_vad_op{op}", vad(op), vad_shapes,
                 f"torch.jit.script, opset {op}: If on a 0-d int64 sample rate, an LSTM cell in each branch, "
                 "recurrent state input; dynamic batch and samples")
           for op in (11, 13, 17)]
    out += [Model(f"ts_gru_loop_op{op}", gru_loop(op), "x:10x1x16,h0:1x1x32",
                  f"torch.jit.script, opset {op}: Loop over the time steps (trip count = x's symbolic dim 0) "
                  "around a one-step GRU layer")
            for op in (11, 17)]
    out += [
        Model("ts_steps_loop", steps_loop, "x:1x8,steps=5",
              "torch.jit.script, opset 17: Loop run `steps` times (an int64 input: a data-dependent trip "
              "count) around an LSTM cell"),
        Model("ts_while_converge", converge, "x:2x16",
              "torch.jit.script, opset 17: while loop whose condition is computed from the data"),
    ]
    axes = [("cnn", 9, {0: "batch"}), ("mobile", 11, {0: "batch"}), ("encoder", 14, {0: "batch", 1: "seq"}),
            ("lstm", 13, {0: "batch", 1: "seq"}), ("encoder", 20, {0: "batch", 1: "seq"})]
    out += [Model(f"ts_{name}_dynamic_op{op}", dynamic_axes(name, op, ax), _shapes(name),
                  f"TorchScript exporter, opset {op}, dynamic axes {sorted(ax.values())}")
            for name, op, ax in axes]
    out += [Model(f"dynamo_{name}_dynamic", dynamo(name, ax), _shapes(name),
                  f"dynamo exporter (onnxscript), dynamic {sorted(ax.values())}")
            for name, ax in (("cnn", {0: "batch"}), ("encoder", {1: "seq"}), ("lstm", {0: "batch", 1: "seq"}))]
    return out


def _shapes(name: str) -> str:
    from benchmarks.exporters.ort_quant import shapes_of

    return shapes_of(name)


def build(outdir: Path) -> list[dict]:
    return build_each(outdir, EXPORTER, models())


if __name__ == "__main__":
    sys.exit(main(build))
