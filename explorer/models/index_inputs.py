"""Integer inputs that index a table: how large a random sample value may be.

A transformer's ``input_ids``, ``token_type_ids`` and ``position_ids`` are indices into an
embedding table (``Gather(table, ids)``). Sample inputs of small random integers overrun a small
table: BERT's ``token_type_ids`` index a table of 2 rows, and ONNX Runtime refuses the reference
run ("indices element out of data bounds"). :func:`index_limits` finds, for each integer graph
input, the smallest table it indexes (through Cast, Reshape, Unsqueeze, Squeeze, Flatten,
Identity), so random samples stay inside it.
"""

from __future__ import annotations

import onnx

_PASS_THROUGH = ("Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity")
_INTEGER = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
            onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


def _rows(model: onnx.ModelProto, table: str, axis: int) -> int | None:
    for init in model.graph.initializer:
        if init.name == table and init.dims:
            return int(init.dims[axis if axis >= 0 else len(init.dims) + axis])
    return None


def index_limits(model: onnx.ModelProto) -> dict[str, int]:
    """For each integer graph input used as ``Gather`` indices into a constant table, the number
    of rows of the smallest such table (a sample value must be below it)."""
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    limits: dict[str, int] = {}
    for inp in model.graph.input:
        if inp.type.tensor_type.elem_type not in _INTEGER:
            continue
        todo, seen = [inp.name], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for node in users.get(name, []):
                if node.op_type in _PASS_THROUGH and node.input[0] == name:
                    todo.extend(node.output)
                elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    rows = _rows(model, node.input[0], axis)
                    if rows:
                        limits[inp.name] = min(rows, limits.get(inp.name, rows))
    return limits


__all__ = ["index_limits"]
