"""Relax function -> networkx DiGraph of operators.

Nodes are the values a person thinks of as layers: inputs, operator calls (``relax.nn.conv2d``),
``call_tir`` kernels (``fused_conv2d_add_relu``), calls of other functions, outputs. Tuples,
tuple get-items and plain rebindings are see-through: an edge goes straight from the producer to
the consumer. Constants are collapsed into their consumer (count and bytes) unless asked for.
The fused functions FuseOps creates are expanded in place and their nodes carry ``group``, so a
drawing shows each fused group as a cluster.

Node attributes: ``kind`` (input, op, kernel, call, output, constant), ``op`` (what is called),
``family`` (the op without namespace or numeric suffix, used to match nodes across snapshots),
``label``, ``shape``, ``dtype``, ``var``, ``group`` (fused function or ""), ``group_call`` (which
call of that function: one fused function can be called several times), ``order`` (topological
index), ``const_count`` and ``const_bytes``, ``const_shapes`` (the collapsed constants' shapes) and
``attrs`` (the operator's attributes as short strings, e.g. ``{"strides": "(2, 2)"}``).
"""

from __future__ import annotations

import re

import networkx as nx
import tvm
from tvm import relax

from explorer.ir.relax_walk import (
    callee_name,
    flatten_args,
    is_constant,
    is_primitive,
    iter_bindings,
    tensor_bytes,
    tensor_info,
)

_SUFFIX = re.compile(r"\d+$")
_CALL_WRAPPERS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")
# VM bookkeeping after lowering: allocations produce buffers that a kernel then writes into
# (destination-passing style); the rest only checks shapes or frees memory. None are drawn.
_ALLOCATIONS = ("relax.vm.alloc_tensor", "relax.vm.alloc_storage", "relax.memory.alloc_tensor",
                "relax.memory.alloc_storage", "relax.builtin.alloc_tensor")
_BOOKKEEPING = ("relax.vm.kill_object", "relax.memory.kill_tensor", "relax.memory.kill_storage",
                "relax.null_value", "vm.builtin.check_tensor_info", "vm.builtin.match_shape",
                "vm.builtin.check_shape_info", "vm.builtin.check_tuple_info")


def op_family(op: str) -> str:
    """``relax.nn.conv2d`` -> ``conv2d``; ``conv2d3`` -> ``conv2d``; fused names kept whole."""
    base = op.rsplit(".", 1)[-1]
    return _SUFFIX.sub("", base) or base


class _Builder:
    def __init__(self, mod: tvm.IRModule, show_constants: bool) -> None:
        self.mod = mod
        self.show_constants = show_constants
        self.g = nx.DiGraph()
        self.order = 0
        self.buffers: set = set()  # vars bound to allocations, written by the next kernel
        self.calls: dict[str, int] = {}  # how often each fused function was expanded so far

    # -- nodes -------------------------------------------------------------------------
    def add_node(self, kind: str, op: str, ty: object, var: str, group: str) -> str:
        node_id = f"n{self.order}"
        shape, dtype = tensor_info(ty)
        self.g.add_node(
            node_id, kind=kind, op=op, family=op_family(op), label=_short(op), shape=shape,
            dtype=dtype, var=var, group=group, group_call=self.calls.get(group, 0) if group else 0,
            order=self.order, const_count=0, const_bytes=0, const_shapes=(), attrs={},
        )
        self.order += 1
        return node_id

    def connect(self, sources: list[str], target: str) -> None:
        for s in sources:
            self.g.add_edge(s, target)

    # -- values ------------------------------------------------------------------------
    def sources_of(self, expr: object, env: dict, consumer_consts: list, group: str) -> list[str]:
        """Graph nodes that produce ``expr`` (a call argument)."""
        out: list[str] = []
        for leaf in flatten_args(expr):
            if isinstance(leaf, relax.Var):
                out.extend(env.get(leaf, []))
            elif isinstance(leaf, relax.TupleGetItem):
                out.extend(self.sources_of(leaf.tuple_value, env, consumer_consts, group))
            elif is_constant(leaf):
                if self.show_constants:
                    out.append(self.add_node("constant", "constant", leaf.ty, "", group))
                else:
                    consumer_consts.append(leaf.ty)
        return out

    def visit_function(self, func: relax.Function, env: dict, group: str) -> list[str]:
        """Add the nodes of ``func``'s body; ``env`` maps its params to their source nodes.

        Returns the nodes producing the function's result."""
        for binding in iter_bindings(func):
            env[binding.var] = self.visit_value(binding.value, binding.var, env, group)
        return self.sources_of(func.body.body, env, [], group)

    def visit_value(self, value: object, var: relax.Var, env: dict, group: str) -> list[str]:
        if isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem)) or is_constant(value):
            return self.sources_of(value, env, [], group)
        if not isinstance(value, relax.Call):
            return [self.add_node("op", type(value).__name__, var.ty, var.name, group)]
        callee = value.op
        if isinstance(callee, tvm.ir.GlobalVar):
            func = self.mod.functions.get(callee) if callee in self.mod.functions else None
            if isinstance(func, relax.Function) and is_primitive(func):
                return self.expand_fused(callee.name_hint, func, value, env)
        name = callee_name(value)
        if name in _ALLOCATIONS:
            self.buffers.add(var)
            return []
        if name in _BOOKKEEPING:
            return []
        consts: list[int] = []
        args = value.args
        if isinstance(callee, tvm.ir.Op) and callee.name in _CALL_WRAPPERS:
            args = args[1:]
        srcs: list[str] = []
        written = [a for a in args if isinstance(a, relax.Var) and a in self.buffers]
        for a in args:
            if not (isinstance(a, relax.Var) and a in self.buffers and not env.get(a)):
                srcs.extend(self.sources_of(a, env, consts, group))
        kind = _kind_of(value, self.mod)
        ty = written[0].ty if written and kind == "kernel" else var.ty
        node = self.add_node(kind, name, ty, var.name, group)
        for buf in written:  # destination-passing style: the kernel now produces these buffers
            env[buf] = [node]
        _add_constants(self.g.nodes[node], consts)
        self.g.nodes[node]["attrs"] = call_attrs(value)
        self.connect(_unique(srcs), node)
        return [node]

    def expand_fused(self, name: str, func: relax.Function, call: relax.Call, env: dict) -> list[str]:
        inner_env: dict = {}
        outer_consts: list[int] = []
        for param, arg in zip(func.params, call.args):
            inner_env[param] = self.sources_of(arg, env, outer_consts, name)
        first = self.order
        self.calls[name] = self.calls.get(name, -1) + 1
        result = self.visit_function(func, inner_env, name)
        if outer_consts and self.order > first:
            _add_constants(self.g.nodes[f"n{first}"], outer_consts)
        return result


def _add_constants(data: dict, types: list) -> None:
    data["const_count"] += len(types)
    data["const_bytes"] += sum(tensor_bytes(t) for t in types)
    data["const_shapes"] = data["const_shapes"] + tuple(
        "x".join(map(str, shape)) if shape else "scalar" for shape, _ in map(tensor_info, types))


def _attr_text(value: object) -> str:
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def call_attrs(call: relax.Call) -> dict[str, str]:
    """The attributes of an operator call as short strings (none for kernels and functions)."""
    attrs = call.attrs
    if attrs is None:
        return {}
    out: dict[str, str] = {}
    info = getattr(type(attrs), "__tvm_ffi_type_info__", None)
    while info is not None:
        for f in info.fields:
            out.setdefault(f.name, _attr_text(getattr(attrs, f.name)))
        info = info.parent_type_info
    if not out and hasattr(attrs, "keys"):  # DictAttrs
        out = {str(k): _attr_text(attrs[k]) for k in attrs.keys()}  # noqa: SIM118 - a TVM map, not a dict
    return out


def _kind_of(call: relax.Call, mod: tvm.IRModule) -> str:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        return "kernel" if op.name in ("relax.call_tir", "relax.call_tir_inplace") else "op"
    if isinstance(op, tvm.ir.GlobalVar) and op in mod.functions:
        return "kernel" if isinstance(mod.functions[op], tvm.tirx.PrimFunc) else "call"
    return "call"


def _short(op: str) -> str:
    return op.removeprefix("relax.")


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def relax_graph(mod: tvm.IRModule, func_name: str = "main", *, show_constants: bool = False) -> nx.DiGraph:
    """The operator graph of ``mod[func_name]`` (see the module docstring for its attributes)."""
    func = mod[func_name]
    b = _Builder(mod, show_constants)
    env: dict = {}
    for p in func.params:
        env[p] = [b.add_node("input", "input", p.ty, p.name, "")]
    results = b.visit_function(func, env, "")
    out = b.add_node("output", "output", func.body.body.ty, "", "")
    b.connect(_unique(results), out)
    b.g.graph["function"] = func_name
    return b.g
