"""Model sources: ONNX files (with symbolic dims and shape arithmetic), examples, PyTorch."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.errors import ModelLoadError, ShapeSpecError, UnsupportedOperatorError
from explorer.models import example_names, import_onnx, load_model, model_choices
from explorer.models.onnx_import import symbolic_dims
from tests.conftest import tiny_cnn


def test_onnx_file_route(tiny_onnx_path):
    loaded = load_model(str(tiny_onnx_path))
    assert loaded.info.origin == "onnx"
    assert loaded.info.inputs == (("input", (1, 3, 16, 16), "float32"),)
    assert loaded.info.outputs[0][1] == (1, 10)
    assert "main" in [gv.name_hint for gv in loaded.mod.get_global_vars()]


def test_symbolic_batch_needs_a_shape_and_takes_one(tmp_path):
    model = tiny_cnn(batch="N")
    assert symbolic_dims(model) == {"input": ["N"]}
    with pytest.raises(ShapeSpecError, match=r"input\[0\] \(N\)"):
        import_onnx(model)
    by_dim = import_onnx(model, "N=2")
    by_input = import_onnx(model, "input:4x3x16x16")
    assert by_dim.info.inputs[0][1] == (2, 3, 16, 16)
    assert by_input.info.outputs[0][1] == (4, 10)


def test_shape_spec_for_unknown_input_is_refused():
    with pytest.raises(ShapeSpecError, match="no input named 'image'.*input"):
        import_onnx(tiny_cnn(), "image:1x3x16x16")


def test_shape_spec_with_wrong_rank_is_refused():
    with pytest.raises(ShapeSpecError, match="rank 4"):
        import_onnx(tiny_cnn(), "input:1x3")


def test_corrupt_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 definitely not protobuf \xff" * 10)
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        load_model(str(bad))


def test_missing_file_and_unknown_spec():
    with pytest.raises(ModelLoadError, match="no such ONNX file"):
        load_model("/nonexistent/model.onnx")
    with pytest.raises(ModelLoadError, match="zoo name"):
        load_model("not-a-model")


def test_unsupported_operator_names_op_and_node():
    model = tiny_cnn()
    model.graph.node.insert(3, helper.make_node("Hardmax", ["r1"], ["hm"], name="the_hardmax"))
    model.graph.node[4].input[0] = "hm"
    model.graph.node[3].op_type = "MyFancyOp"
    with pytest.raises(UnsupportedOperatorError) as info:
        import_onnx(model)
    assert info.value.op_type == "MyFancyOp" and info.value.node_name == "the_hardmax"
    assert "MyFancyOp" in str(info.value) and "the_hardmax" in str(info.value)


def _runtime_reshape_model() -> onnx.ModelProto:
    """x -> Relu -> Reshape to [Shape(x)[0], -1]: the new shape is computed at run time."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["r", "new_shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, "int64"), "zero"),
             numpy_helper.from_array(np.array([0], "int64"), "axes"),
             numpy_helper.from_array(np.array([-1], "int64"), "minus_one")]
    graph = helper.make_graph(nodes, "runtime_reshape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_runtime_shape_arithmetic_is_folded():
    loaded = import_onnx(_runtime_reshape_model(), "batch=2")
    assert loaded.info.outputs[0][1] == (2, 20)


def test_examples_from_the_onnx_package():
    names = example_names()
    assert "resnet50" in names
    assert f"example:{names[0]}" in model_choices()
    loaded = load_model("example:squeezenet")
    assert loaded.info.origin == "example" and loaded.info.inputs[0][1] == (1, 3, 224, 224)


def test_unknown_example():
    with pytest.raises(ModelLoadError, match="unknown example"):
        load_model("example:nope")


def test_torch_route():
    torch = pytest.importorskip("torch")
    from explorer.models import import_torch

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            y = torch.relu(self.conv(x)).mean(dim=(2, 3))
            return self.fc(y)

    torch.manual_seed(0)
    net = TinyNet()
    x = torch.randn(1, 3, 8, 8)
    loaded = import_torch(net, (x,))
    assert loaded.info.origin == "torch" and loaded.info.outputs[0][1] == (1, 2)

    import tvm
    from tvm import relax

    ex = tvm.compile(loaded.mod, target=tvm.target.Target({"kind": "llvm"}))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), net(x).detach().numpy(), atol=1e-5)


def test_torch_route_rejects_non_modules():
    pytest.importorskip("torch")
    from explorer.models import import_torch

    with pytest.raises(ModelLoadError, match="torch.nn.Module"):
        import_torch(object(), ())


@pytest.fixture
def fallback_fold(monkeypatch):
    """Hold back the shape folding that runs before import (it fixes the printing model), so that
    TVM's first attempt fails and prints, and the fold after it runs."""
    import explorer.models.prepare as prepare

    monkeypatch.setattr(prepare, "fold_shape_arithmetic", lambda model: (model, []))


def _printing_model() -> onnx.ModelProto:
    """Reshape to a shape TVM sees as a tensor: its importer prints "Error converting operator
    Reshape ..." to stdout, then schedx's folding makes the import succeed."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Reshape", ["s", "as_row"], ["s_row"]),
        helper.make_node("Reshape", ["s_row", "as_vec"], ["s_vec"]),
        helper.make_node("Reshape", ["r", "s_vec"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([1, 3], "int64"), "as_row"),
             numpy_helper.from_array(np.array([3], "int64"), "as_vec")]
    graph = helper.make_graph(nodes, "printing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_what_tvm_prints_is_kept_off_stdout(capfd, fallback_fold):
    from tvm.relax.frontend.onnx import from_onnx

    from explorer.models.onnx_import import fix_input_shapes
    from explorer.models.shapes import parse_shape_spec

    fixed, _ = fix_input_shapes(_printing_model(), parse_shape_spec("batch=2"))
    with pytest.raises(Exception, match="Reshape requires"):  # TVM's own error type
        from_onnx(fixed, shape_dict={"x": [2, 4, 5]})
    assert "Error converting operator Reshape" in capfd.readouterr().out  # TVM does print, unguarded

    loaded = import_onnx(_printing_model(), "batch=2")
    out, err = capfd.readouterr()
    assert out == "" and "BlockBuilder" not in err  # nor TVM's C++ logger on stderr
    assert any(line.startswith("Error converting operator Reshape") for line in loaded.info.import_log)
    assert any("first attempt failed (while converting Reshape)" in n for n in loaded.info.notes)
    assert not any("Error converting" in line for line in loaded.info.note_lines())
    assert any("Error converting" in line for line in loaded.info.note_lines(verbose=True))
    assert loaded.info.to_dict()["import_log"] == list(loaded.info.import_log)


def test_capture_takes_c_level_and_python_prints(capfd):
    import ctypes
    import sys

    from explorer.models.quiet import captured_output

    with captured_output() as printed:
        print("from python")
        sys.stdout.flush()
        ctypes.CDLL(None).printf(b"from C\n")
        os.write(1, b"from fd 1\n")
    assert capfd.readouterr().out == ""
    assert sorted(printed.lines) == ["from C", "from fd 1", "from python"]


def test_passes_json_is_valid_on_a_model_whose_import_prints(tmp_path, fallback_fold):
    import json

    from click.testing import CliRunner

    from app.cli import cli

    path = tmp_path / "printing.onnx"
    onnx.save(_printing_model(), path)
    result = CliRunner().invoke(cli, ["passes", str(path), "--shapes", "batch=2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["model"]["inputs"][0]["shape"] == [2, 4, 5]


def test_kernels_of_a_model_with_symbolic_dims_take_shapes(tmp_path):
    import json

    from click.testing import CliRunner

    from app.cli import cli

    path = tmp_path / "dyn.onnx"
    onnx.save(tiny_cnn(batch="N"), path)
    refused = CliRunner().invoke(cli, ["kernels", "--model", str(path)])
    assert refused.exit_code == 1 and "symbolic" in refused.output and "shape spec" in refused.output
    result = CliRunner().invoke(cli, ["kernels", "--model", str(path), "--shapes", "N=2", "--json"])
    assert result.exit_code == 0, result.output
    kernels = json.loads(result.stdout)
    assert kernels and any(2 in b["shape"][:1] for k in kernels for b in k["buffers"])


def test_every_unsupported_operator_is_named_with_its_nodes_in_one_message():
    """Issue 27: a dynamically quantized model was refused naming only the first of its 21
    unsupported nodes; the message names every unsupported operator and its nodes."""
    from onnx import TensorProto, helper, numpy_helper

    from explorer.errors import UnsupportedOperatorError
    from explorer.models.onnx_ops import check_operators

    nodes = []
    x = "x"
    for k in range(3):  # ConvInteger and Celu: no converter in TVM 0.27; Relu: fine
        nodes.append(helper.make_node("ConvInteger", [x, "w"], [f"c{k}"], name=f"conv{k}"))
        nodes.append(helper.make_node("Cast", [f"c{k}"], [f"f{k}"], to=TensorProto.UINT8, name=f"cast{k}"))
        x = f"f{k}"
    nodes += [helper.make_node("Cast", [x], ["g"], to=TensorProto.FLOAT, name="tofloat"),
              helper.make_node("Celu", ["g"], ["h"], name="celu"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((4, 4, 1, 1), "uint8"), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOperatorError) as info:
        check_operators(model)
    text = str(info.value)
    assert info.value.op_type == "ConvInteger" and info.value.node_name == "conv0"  # the first, as before
    assert set(info.value.unsupported) == {"ConvInteger", "Celu"}, text
    assert text.startswith("4 nodes use 2 operators") and "'ConvInteger' (3 nodes: 'conv0', 'conv1', 'conv2')" in text
    assert "'Celu' (1 node: 'celu')" in text and "Relu" not in text and "Cast" not in text, text


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_a_model_path_that_is_no_regular_file_is_named_for_what_it_is(tmp_path, kind):
    """Issue 30, probe 7: a symlink to /dev/urandom given as a model read "no such ONNX file"."""
    import os

    from explorer.errors import ModelLoadError
    from explorer.models.onnx_import import read_onnx

    path = tmp_path / "model.onnx"
    if kind == "device":
        path.symlink_to("/dev/urandom")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    words = "is a folder" if kind == "folder" else "is not a regular file"
    with pytest.raises(ModelLoadError, match=words):
        read_onnx(path)


def _graph_reading(name: str, *, branch_reads: str | None = None) -> onnx.ModelProto:
    """x -> Add(x, NAME) -> y; with ``branch_reads``, y also goes through an If whose branches read
    that name from the graph around them (as ONNX allows)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Add", ["x", name], ["y"], name="add0")]
    out = "y"
    if branch_reads is not None:
        def branch(tag):
            return helper.make_graph([helper.make_node("Identity", [branch_reads], [f"b{tag}"], name=f"id_{tag}")],
                                     f"branch_{tag}", [], [helper.make_tensor_value_info(f"b{tag}", TensorProto.FLOAT,
                                                                                         [1, 4])])
        cond = numpy_helper.from_array(np.array(True), "cond")
        nodes.append(helper.make_node("If", ["cond"], ["z"], name="if0", then_branch=branch("t"),
                                      else_branch=branch("e")))
        out, inits = "z", [cond]
    else:
        inits = []
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_dangling_input_names_the_node_and_the_missing_tensor(tmp_path):
    """Issue 49: a node reading a tensor nothing produces gave "TVM could not import the model:
    'nope'"; the graph is walked before TVM sees it (subgraphs included)."""
    from click.testing import CliRunner

    from app.cli import cli

    path = tmp_path / "dangling.onnx"
    onnx.save(_graph_reading("nope"), path)
    with pytest.raises(ModelLoadError, match="node 'add0' \\(Add\\) reads the tensor 'nope', which no node produces"):
        import_onnx(path)
    result = CliRunner().invoke(cli, ["kernels", "--model", str(path)], obj={})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "reads the tensor 'nope'" in lines[0] and "TVM could not import" not in lines[0], lines[0]
    from explorer.models.onnx_import import check_graph

    inner = _graph_reading("x", branch_reads="gone")  # a branch reading a name no graph around it has
    with pytest.raises(ModelLoadError, match=r"'id_[et]' \(Identity\) reads the tensor 'gone'.* node 'if0' \(If\)"):
        check_graph(inner)
    check_graph(_graph_reading("x", branch_reads="y"))  # a branch may read the outer graph's tensors
