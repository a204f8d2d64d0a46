"""Tiny ONNX models for the import tests (built here, no download), and runners for both sides:
ONNX Runtime as the reference, TVM (``tvm.compile`` for the plain host CPU) as the subject."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(nodes, name, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _branch(name: str, op: str, src: str = "x", **attrs) -> onnx.GraphProto:
    node = helper.make_node(op, [src], [f"{name}_y"], name=f"{name}_{op.lower()}", **attrs)
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])


def if_on_shape() -> onnx.ModelProto:
    """``Relu(x) if x.shape[0] > 1 else Sigmoid(x)``, batch symbolic: the shapes decide."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="batch_of"),
             helper.make_node("Greater", ["n", "one"], ["c"], name="is_batched"),
             helper.make_node("If", ["c"], ["y"], name="If_0",
                              then_branch=_branch("then", "Relu"), else_branch=_branch("else", "Sigmoid")),
             helper.make_node("Mul", ["y", "x"], ["out"], name="mul")]
    inits = [numpy_helper.from_array(np.array(0, "int64"), "zero"), numpy_helper.from_array(np.array(1, "int64"), "one")]
    return _model(nodes, "if_on_shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 6])], inits)


def if_on_constant(flag: bool = False) -> onnx.ModelProto:
    """``Relu(x) if not flag else Tanh(x)`` with ``flag`` a constant initializer (listed among the
    graph inputs too, as old exporters did)."""
    nodes = [helper.make_node("Not", ["flag"], ["use_relu"], name="negate"),
             helper.make_node("If", ["use_relu"], ["y"], name="If_flag",
                              then_branch=_branch("then", "Relu"), else_branch=_branch("else", "Tanh")),
             helper.make_node("Add", ["y", "x"], ["out"], name="add")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    return _model(nodes, "if_on_constant", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5])],
                  [numpy_helper.from_array(np.array(flag), "flag")])


def if_on_values(else_op: str = "Sigmoid") -> onnx.ModelProto:
    """``Relu(x) if sum(x) > 0 else <else_op>(x)``: it branches on input values, at run time."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="total"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["y"], name="If_values",
                              then_branch=_branch("then", "Relu"), else_branch=_branch("else", else_op)),
             helper.make_node("Add", ["y", "y"], ["out"], name="double")]
    return _model(nodes, "if_on_values", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])],
                  [numpy_helper.from_array(np.array(0, "float32"), "zero")])


def recurrent(op: str, direction: str = "forward", *, bias: bool = True, initial: bool = True, layout: int = 0,
              seq: int | str = 3, batch: int = 2, inputs: int = 3, hidden: int = 4, seed: int = 0,
              opset: int = 17, **attrs) -> onnx.ModelProto:
    """One LSTM/GRU/RNN layer with seeded weights; ``attrs`` go on the node (``clip``,
    ``activations``, ``linear_before_reset``, ``peepholes=True`` adds P for an LSTM)."""
    rng = np.random.default_rng(seed)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    peepholes = attrs.pop("peepholes", False)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (dirs, gates * hidden, inputs)).astype("float32"), "W"),
             numpy_helper.from_array(rng.normal(0, 0.5, (dirs, gates * hidden, hidden)).astype("float32"), "R")]
    x_shape = [batch, seq, inputs] if layout else [seq, batch, inputs]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (dirs, 2 * gates * hidden)).astype("float32"), "B"))
        names[3] = "B"
    if initial:
        names[5] = "h0"
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, state))
        if op == "LSTM":
            names[6] = "c0"
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, state))
    if peepholes:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (dirs, 3 * hidden)).astype("float32"), "P"))
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(op, names, outputs, name=f"{op.lower()}0", hidden_size=hidden, direction=direction, **attrs)
    model = _model([node], f"{op.lower()}_{direction}", graph_inputs,
                   [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits, opset)
    return model


def random_feeds(model: onnx.ModelProto, seed: int = 1, **shapes) -> dict[str, np.ndarray]:
    """Standard-normal inputs for every graph input that is not an initializer; ``shapes`` gives
    a shape for inputs whose shape is symbolic."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = shapes.get(inp.name) or [d.dim_value for d in inp.type.tensor_type.shape.dim]
        out[inp.name] = rng.standard_normal(shape).astype("float32")
    return out


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def tvm_run(loaded, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Build ``loaded.mod`` with ``tvm.compile`` for the plain host CPU and run it on ``feeds``
    (in the order of the model's inputs)."""
    import tvm
    from tvm import relax

    ex = tvm.compile(loaded.mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[name]) for name, _, _ in loaded.info.inputs])
    return [o.numpy() for o in _flat(out)]


def _flat(value) -> list:
    if hasattr(value, "numpy"):
        return [value]
    return [leaf for v in value for leaf in _flat(v)]
