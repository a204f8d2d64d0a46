import pytest

from explorer.errors import ShapeSpecError
from explorer.models.shapes import parse_shape_spec


def test_parses_inputs_and_named_dims():
    spec = parse_shape_spec("input:1x3x224x224, batch=2; mask:1*128")
    assert spec.inputs == {"input": (1, 3, 224, 224), "mask": (1, 128)}
    assert spec.dims == {"batch": 2}


def test_mapping_form():
    spec = parse_shape_spec({"input": [1, 3, 8, 8], "seq": 16})
    assert spec.inputs == {"input": (1, 3, 8, 8)} and spec.dims == {"seq": 16}


def test_empty_is_empty():
    assert parse_shape_spec(None).is_empty() and parse_shape_spec("  ").is_empty()


@pytest.mark.parametrize("bad, words", [
    ("input:1xAx3", "'A' is not a whole number"),
    ("input:1x0", "positive"),
    ("justaname", "NAME:1x3x224x224"),
    ("input:", "no dimensions"),
    ("batch=-1", "positive"),
])
def test_bad_specs_name_the_problem(bad, words):
    with pytest.raises(ShapeSpecError, match=words):
        parse_shape_spec(bad)


@pytest.mark.parametrize("bad, words", [
    ("input:1x3x99999999x99999999", "elements"),  # OverflowError deep in the import before
    ("batch=99999999999999999999", "far too large"),  # protobuf's ValueError before
    ("input:1x3x\uff12\uff12\uff14x224", "digits 0-9"),  # full-width digits: int() reads them
    ("batch=\u0661", "digits 0-9"),  # an Arabic-Indic one
    ("batch=1, batch=2", "given twice"),
    ("input:1x3x8x8; input:1x3x4x4", "given twice"),
    ("input:1x3x2147483648x1", "too large"),
])
def test_overflows_duplicates_and_foreign_digits_are_refused(bad, words):
    with pytest.raises(ShapeSpecError, match=words):
        parse_shape_spec(bad)


def test_mapping_form_refuses_booleans_and_huge_shapes():
    with pytest.raises(ShapeSpecError):
        parse_shape_spec({"batch": True})
    with pytest.raises(ShapeSpecError, match="elements"):
        parse_shape_spec({"input": [1, 3, 99999999, 99999999]})


def test_a_dimension_name_no_input_has_is_refused_not_ignored():
    """Issues 27 and 30: `schedx export resnet18 --shapes batch=100000` exported batch 1 without a
    word (the zoo's inputs are fixed); a name that no symbolic dimension carries is refused, with
    the inputs and what to write instead."""
    from explorer.models.onnx_import import fix_input_shapes
    from tests.conftest import tiny_cnn

    with pytest.raises(ShapeSpecError, match=r"no input dimension is named 'batch'.*input shapes are fixed"):
        fix_input_shapes(tiny_cnn(), parse_shape_spec("batch=100000"))
    with pytest.raises(ShapeSpecError, match=r"no input dimension is named 'bacth'.*symbolic dimensions are N"):
        fix_input_shapes(tiny_cnn(batch="N"), parse_shape_spec("bacth=2"))
    _, shapes = fix_input_shapes(tiny_cnn(batch="N"), parse_shape_spec("N=2"))
    assert next(iter(shapes.values()))[0] == 2


def test_the_suggested_shape_keeps_known_sizes_and_guesses_plausible_ones():
    """An image input with symbolic height and width was told to try 1x1x1x1."""
    from onnx import TensorProto, helper

    from explorer.models.onnx_import import fix_input_shapes

    def model(dims):
        x = helper.make_tensor_value_info("images", TensorProto.FLOAT, dims)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
        return helper.make_model(helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g", [x], [y]))

    with pytest.raises(ShapeSpecError, match=r"'images:1x3x224x224' or 'batch=1'"):
        fix_input_shapes(model(["batch", 3, "height", "width"]), parse_shape_spec(""))
    with pytest.raises(ShapeSpecError, match=r"'images:1x128x768'"):
        fix_input_shapes(model(["batch", "seq", 768]), parse_shape_spec(""))
