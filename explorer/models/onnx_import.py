"""Import an ONNX model (file, bytes or ModelProto) into Relax.

Steps, each with an error a user can act on:
1. parse the protobuf (a corrupt or non-ONNX file says so);
2. find the real inputs (graph inputs that are not initializers) and fix every symbolic or
   unknown dimension from the user's shape spec (missing ones are listed by name);
3. prepare the model for TVM (:mod:`explorer.models.prepare`): fold ``If`` nodes the shapes
   decide, unroll recurrent layers, write QOperator quantized ops as QDQ, and check every node
   against what TVM's importer really takes, so an unsupported operator is named with its node;
4. run ``from_onnx``; when TVM needs static shapes that the graph computes at run time
   (Shape -> Slice -> Concat -> Reshape), fold the shape arithmetic with onnxscript's optimizer
   and try again.

Whatever TVM prints meanwhile is kept off stdout (:mod:`explorer.models.quiet`) and kept in
``ModelInfo.import_log``. ``LoadedModel.onnx_model`` is the user's model with its shapes fixed,
before any rewrite: ONNX Runtime runs it as the reference.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import onnx

from explorer.errors import ModelLoadError, ShapeSpecError, short_tvm_message
from explorer.models.control_flow import fold_constants, pin_scalar_inputs, runtime_ifs
from explorer.models.onnx_ops import check_operators
from explorer.models.prepare import prepare_for_tvm
from explorer.models.quiet import captured_output
from explorer.models.shapes import ShapeSpec, parse_shape_spec
from explorer.models.source import InputSpec, LoadedModel, ModelInfo


def read_onnx(source: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Parse an ONNX model from a path, raw bytes or an existing proto, and check that its graph is
    whole (:func:`check_graph`)."""
    if isinstance(source, onnx.ModelProto):
        check_graph(source, source.graph.name or "the model")
        return source
    if isinstance(source, (bytes, bytearray)):
        data, where = bytes(source), "the uploaded data"
    else:
        path = Path(source)
        if not path.is_file():
            if path.is_dir():
                raise ModelLoadError(f"{path} is a folder, not an ONNX file")
            if path.exists():  # a FIFO would block the read, a device never end: named, never opened
                raise ModelLoadError(f"{path} is not a regular file (a device, FIFO or socket), not an ONNX file")
            raise ModelLoadError(f"no such ONNX file: {path}")
        data, where = path.read_bytes(), str(path)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # protobuf raises DecodeError and friends
        raise ModelLoadError(f"{where} is not a readable ONNX model ({short_tvm_message(err, 200)})") from err
    if not model.graph.node:
        raise ModelLoadError(f"{where} is not an ONNX model: it has no graph nodes")
    check_graph(model, where)
    return model


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type}, unnamed)"


def _missing_tensor(graph: onnx.GraphProto, outer: frozenset[str]) -> str | None:
    """What in ``graph`` (or a subgraph of an If, Loop or Scan in it) reads a tensor that nothing
    defines, in words; None when every tensor read has a source. A subgraph may read the names of
    the graphs around it (``outer``)."""
    defined = set(outer) | {i.name for i in graph.input} | {i.name for i in graph.initializer} | \
        {i.values.name for i in graph.sparse_initializer} | {o for n in graph.node for o in n.output if o}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined:  # ("" is an optional input left out)
                return (f"node {_node_label(node, index)} reads the tensor {name!r}, which no node produces and "
                        "which is not an input or initializer of the graph")
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found = _missing_tensor(sub, frozenset(defined))
                if found:
                    return f"{found} (in the {attr.name!r} graph of node {_node_label(node, index)})"
    for out in graph.output:
        if out.name not in defined:
            return f"the graph's output {out.name!r} is produced by no node"
    return None


def check_graph(model: onnx.ModelProto, where: str = "the model") -> None:
    """Refuse a graph that reads a tensor nothing defines (a dangling input: TVM's importer fails
    with only the tensor's name), naming the node and the tensor."""
    problem = _missing_tensor(model.graph, frozenset())
    if problem:
        raise ModelLoadError(f"{where} is not a whole ONNX graph: {problem}. Fix or re-export the model "
                             "(onnx.checker.check_model(model, full_check=True) reports such problems)")


def _dtype_name(elem_type: int) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "float32"


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (old exporters list initializers as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def symbolic_dims(model: onnx.ModelProto) -> dict[str, list[str]]:
    """For each input, the names (or ``?`` positions) of dimensions that are not fixed."""
    out: dict[str, list[str]] = {}
    for inp in model_inputs(model):
        dims = inp.type.tensor_type.shape.dim
        free = [d.dim_param or f"?{k}" for k, d in enumerate(dims) if not d.HasField("dim_value")]
        if free:
            out[inp.name] = free
    return out


def fix_input_shapes(model: onnx.ModelProto, spec: ShapeSpec) -> tuple[onnx.ModelProto, dict[str, tuple[int, ...]]]:
    """A copy of ``model`` whose inputs all have static shapes, and those shapes by input name."""
    names = [i.name for i in model_inputs(model)]
    unknown = sorted(set(spec.inputs) - set(names))
    if unknown:
        raise ShapeSpecError(f"no input named {', '.join(map(repr, unknown))}; the model's inputs are: {', '.join(names)}")
    params = {d.dim_param for i in model_inputs(model) for d in i.type.tensor_type.shape.dim
              if d.dim_param and not d.HasField("dim_value")}
    # `--shapes sr=16000`: a name that is no dimension but a scalar input fixes that input's value
    model, pinned = pin_scalar_inputs(model, {k: v for k, v in spec.dims.items() if k not in params})
    unused = sorted(set(spec.dims) - params - set(pinned))
    if unused:  # `--shapes batch=100000` on a model whose batch is fixed: refused, not silently ignored
        listed = ", ".join(f"{i.name} [{'x'.join(d.dim_param or str(d.dim_value) for d in i.type.tensor_type.shape.dim)}]"
                           for i in model_inputs(model))
        fix = (f"its symbolic dimensions are {', '.join(sorted(params))}" if params else
               "its input shapes are fixed; give a whole shape instead (NAME:1x3x224x224) to change one")
        raise ShapeSpecError(f"no input dimension is named {', '.join(map(repr, unused))}: the model's inputs are "
                             f"{listed}; {fix}")
    model = copy.deepcopy(model)
    shapes: dict[str, tuple[int, ...]] = {}
    missing: list[str] = []
    for inp in model_inputs(model):
        tt = inp.type.tensor_type
        if inp.name in spec.inputs:
            want = spec.inputs[inp.name]
            if tt.HasField("shape") and len(tt.shape.dim) not in (0, len(want)):
                raise ShapeSpecError(f"input {inp.name!r} has rank {len(tt.shape.dim)}, the shape given has {len(want)} dims")
            tt.shape.Clear()
            for v in want:
                tt.shape.dim.add().dim_value = v
            shapes[inp.name] = want
            continue
        dims = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.dim_param and d.dim_param in spec.dims:
                d.dim_value = spec.dims[d.dim_param]
                dims.append(d.dim_value)
            else:
                missing.append(f"{inp.name}[{k}]" + (f" ({d.dim_param})" if d.dim_param else ""))
        if not tt.HasField("shape"):
            missing.append(f"{inp.name} (no shape at all)")
        shapes[inp.name] = tuple(dims)
    if missing:
        first = model_inputs(model)[0]
        example = f"{first.name}:" + _example_shape(first.type.tensor_type.shape.dim)
        named = [d.dim_param for i in model_inputs(model) for d in i.type.tensor_type.shape.dim
                 if d.dim_param and not d.HasField("dim_value")]
        raise ShapeSpecError(
            "these input dimensions are symbolic or unknown: " + ", ".join(missing)
            + f". Fix them with a shape spec such as '{example}' or '{named[0] if named else 'batch'}=1' (--shapes).")
    return model, shapes


def _example_shape(dims) -> str:
    """A plausible shape to suggest for an input: its known sizes kept, an unknown batch (the first
    dimension) 1, unknown image sides 224 (4-D inputs) and sequence lengths 128 (others)."""
    dims = list(dims) or [None]
    guess = 224 if len(dims) == 4 else 128
    sizes = [d.dim_value if d is not None and d.HasField("dim_value") else (1 if k == 0 else guess)
             for k, d in enumerate(dims)]
    return "x".join(map(str, sizes))


def _outputs(mod) -> tuple[InputSpec, ...]:
    from explorer.ir.relax_walk import tensor_info

    ty = mod["main"].body.body.ty
    fields = getattr(ty, "fields", None) or [ty]
    out = []
    for k, f in enumerate(fields):
        shape, dtype = tensor_info(f)
        out.append((f"output{k}" if len(fields) > 1 else "output", tuple(shape or ()), dtype or "?"))
    return tuple(out)


def _converting(lines: list[str]) -> str:
    """' (while converting Reshape)' from what TVM printed before failing, else ''."""
    for line in lines:
        if line.startswith("Error converting operator "):
            return f" (while converting {line.split()[3].rstrip(',')})"
    return ""


_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _c_named_inputs(model: onnx.ModelProto, shape_dict: dict, dtypes: dict) -> tuple[onnx.ModelProto, dict, dict]:
    """``model`` (a copy) whose graph inputs have names a C compiler accepts, with ``shape_dict`` and
    ``dtypes`` keyed by them. TVM names a kernel's parameters after the model's inputs: the
    ``onnx`` package's ZFNet and ShuffleNet read ``gpu_0/data_0``, which nvcc refuses in the CUDA
    source (``gpu_0/data_0_ptr``). The model's own names stay what the user feeds."""
    taken = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
    renamed = {}
    for inp in model.graph.input:
        if inp.name in shape_dict and not _C_NAME.fullmatch(inp.name):
            base = re.sub(r"\W", "_", inp.name)
            base = base if re.match(r"[A-Za-z_]", base) else f"input_{base}"
            new, k = base, 1
            while new in taken:
                new, k = f"{base}_{k}", k + 1
            taken.add(new)
            renamed[inp.name] = new
    if not renamed:
        return model, shape_dict, dtypes
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for inp in out.graph.input:
        inp.name = renamed.get(inp.name, inp.name)
    for node in out.graph.node:
        for j, name in enumerate(node.input):
            if name in renamed:
                node.input[j] = renamed[name]
    for out_ in out.graph.output:
        out_.name = renamed.get(out_.name, out_.name)
    return (out, {renamed.get(k, k): v for k, v in shape_dict.items()},
            {renamed.get(k, k): v for k, v in dtypes.items()})


def _convert(model: onnx.ModelProto, shape_dict: dict, dtypes: dict, log: list[str]):
    """``from_onnx`` with stdout captured into ``log``; raises what TVM raised."""
    from explorer.graph.onnx_names import traced_from_onnx as from_onnx  # the same import, node names kept

    model, shape_dict, dtypes = _c_named_inputs(model, shape_dict, dtypes)
    printed = None
    try:
        with captured_output() as printed:
            return from_onnx(model, shape_dict={k: list(v) for k, v in shape_dict.items()}, dtype_dict=dtypes)
    finally:
        if printed is not None:
            log.extend(printed.lines)


def _import_prepared(prepared: onnx.ModelProto, shape_dict: dict, dtypes: dict, log: list[str],
                     notes: list[str]) -> tuple[object, ModelLoadError | None]:
    """``from_onnx``, then once more after folding shape arithmetic; the Relax module, or the
    error to raise (returned, so that TVM's objects of the failed attempt are freed, and what
    its logger says then captured, before the caller raises)."""
    try:
        return _convert(prepared, shape_dict, dtypes, log), None
    except Exception as first:  # noqa: BLE001 - TVM raises many kinds; folding may still help
        failed = _converting(log)
        try:
            mod = _convert(fold_constants(prepared), shape_dict, dtypes, log)
        except Exception:  # noqa: BLE001 - the first error is the one to report
            branches = "".join(f"; {p.describe()}, which TVM imports as a Relax If (branch outputs and the "
                               "condition must convert)" for p in runtime_ifs(prepared))
            error = ModelLoadError(f"TVM could not import the model{failed}: {short_tvm_message(first)}{branches}")
            error.__cause__ = first
            return None, error
        notes.append("shape arithmetic was folded with onnxscript's optimizer before import"
                     + (f"; TVM's first attempt failed{failed}" if failed else ""))
        return mod, None


def import_onnx(source: str | os.PathLike | bytes | onnx.ModelProto, shapes: str | dict | ShapeSpec | None = None,
                *, name: str | None = None, origin: str = "onnx") -> LoadedModel:
    """Load an ONNX model into Relax (see the module docstring for the steps and errors)."""
    model = read_onnx(source)
    spec = parse_shape_spec(shapes)
    fixed, shape_dict = fix_input_shapes(model, spec)
    dtypes = {i.name: _dtype_name(i.type.tensor_type.elem_type) for i in model_inputs(fixed)}
    log: list[str] = []
    with captured_output(stderr=True) as printed:  # onnx, onnxscript and TVM's C++ logger too
        prepared, notes = prepare_for_tvm(fixed)
        pinned = [i.name for i in model_inputs(model) if i.name not in shape_dict]  # `--shapes sr=16000`
        notes[:0] = [f"input {name!r} fixed to {spec.dims[name]} (--shapes): a constant of the model, the If nodes "
                     "it decides spliced to the branch taken" for name in pinned if name in spec.dims]
        mod, error = _import_prepared(prepared, shape_dict, dtypes, log, notes)
    log += printed.lines
    if error is not None:
        raise error
    if isinstance(source, (str, os.PathLike)):
        label = str(source)
    else:
        label = model.graph.name or "uploaded model"
    info = ModelInfo(
        name=name or (Path(label).stem if isinstance(source, (str, os.PathLike)) else label),
        origin=origin,
        inputs=tuple((n, shape_dict[n], dtypes[n]) for n in shape_dict),
        outputs=_outputs(mod),
        source=label,
        notes=tuple(notes),
        import_log=tuple(log),
    )
    return LoadedModel(info=info, mod=mod, onnx_model=fixed)


__all__ = ["check_graph", "check_operators", "fix_input_shapes", "import_onnx", "model_inputs", "read_onnx",
           "symbolic_dims"]
