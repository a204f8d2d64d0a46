"""Which ONNX operators TVM's importer really takes, and why a model's node is refused.

TVM 0.27's ONNX importer converts most operators through its converter table, but handles some
(``If``) itself, outside that table, in a set local to its own operator check. Rather than copy
that set, :func:`importable_ops` asks the importer: every standard operator missing from the
table is put to the importer's own check, and those it lets through are handled directly.

:func:`check_operators` walks the main graph and the branches of every ``If`` (TVM converts
them too) and raises :class:`UnsupportedOperatorError` naming the first node it cannot import,
with a reason where schedx knows one (loops, recurrent layers inside a loop body, custom domains).
Recurrent layers of the main graph and of If branches are rewritten before the check
(:mod:`explorer.models.recurrent`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import onnx
from onnx import helper

from explorer.errors import UnsupportedOperatorError
from explorer.models.recurrent import RECURRENCE_DOMAIN

_STANDARD = ("", "ai.onnx")
_REASONS = {
    "Loop": "TVM's importer has no Loop (a loop whose trip count is known at run time only); "
            "export the model with the loop unrolled, or with static shapes so exporters can fold it",
    "Scan": "TVM's importer has no Scan; export the model with the scan unrolled",
    "LSTM": "recurrent layers are rewritten for TVM in the main graph and in If branches, not in a loop body",
    "GRU": "recurrent layers are rewritten for TVM in the main graph and in If branches, not in a loop body",
    "RNN": "recurrent layers are rewritten for TVM in the main graph and in If branches, not in a loop body",
}


@functools.lru_cache(maxsize=1)
def directly_handled_ops() -> frozenset[str]:
    """Standard operators TVM's importer handles outside its converter table (``If`` in 0.27),
    found by putting each operator missing from the table to the importer's own check."""
    from tvm.relax.frontend.onnx import onnx_frontend

    table = onnx_frontend._get_convert_map()
    check = getattr(onnx_frontend.ONNXGraphImporter, "_check_for_unsupported_ops", None)
    if check is None:  # an importer without the check: only the table is known
        return frozenset()
    importer = onnx_frontend.ONNXGraphImporter({}, {})
    names = sorted({s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in _STANDARD})
    return frozenset(name for name in names if name not in table and _accepted(check, importer, name))


def _accepted(check, importer, op_type: str) -> bool:
    probe = helper.make_graph([helper.make_node(op_type, [], [])], "probe", [], [])
    try:
        check(importer, probe)
    except Exception:  # noqa: BLE001 - the importer refuses it: not handled
        return False
    return True


@functools.lru_cache(maxsize=1)
def importable_ops() -> frozenset[str]:
    """Every standard ONNX operator TVM's importer takes: its table plus what it handles directly."""
    from tvm.relax.frontend.onnx import onnx_frontend

    return frozenset(onnx_frontend._get_convert_map()) | directly_handled_ops()


def walk_nodes(graph: onnx.GraphProto, path: str = "") -> Iterator[tuple[onnx.NodeProto, str]]:
    """Every node of ``graph`` and of its subgraphs (If branches, loop bodies), with where it sits
    (``""`` for the main graph, ``"If_0/then_branch"`` inside a branch)."""
    for node in graph.node:
        yield node, path
        for attr in node.attribute:
            label = f"{path}{node.name or node.op_type}/{attr.name}"
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attr.g, label + "/")
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, g in enumerate(attr.graphs):
                    yield from walk_nodes(g, f"{label}[{k}]/")


def check_operators(model: onnx.ModelProto, *, skip: tuple[str, ...] = ()) -> None:
    """Raise :class:`UnsupportedOperatorError` naming every node TVM cannot import, by operator
    (a dynamically quantized model has 21, of four kinds); main-graph nodes whose type is in
    ``skip`` are left to a rewrite that runs before import."""
    known = importable_ops()
    found: dict[str, tuple[list[str], str]] = {}
    for node, where in walk_nodes(model.graph):
        if node.domain in _STANDARD and not where and node.op_type in skip:
            continue
        if node.domain in _STANDARD and node.op_type in known:
            continue
        if node.domain == RECURRENCE_DOMAIN:  # schedx's own, left by a rewrite for its importer (If branches too)
            continue
        op = node.op_type if node.domain in _STANDARD else f"{node.domain}.{node.op_type}"
        name = where + (node.name or (node.output[0] if node.output else ""))
        if node.domain not in _STANDARD:
            detail = (f"it belongs to the custom domain {node.domain!r} (an ONNX Runtime extension); "
                      "TVM imports standard ONNX operators only: export the model again with standard ones")
            if node.domain == "com.microsoft":  # most are ONNX Runtime's fusions of standard operators
                detail += ("; export the model again without ONNX Runtime's graph optimizations (a model saved "
                           "with optimized_model_filepath holds its fusions), or as plain ONNX (quantize in QDQ "
                           "format; schedx rewrites quantize_dynamic's own operators)")
        else:
            detail = _REASONS.get(node.op_type, "")
        found.setdefault(op, ([], detail))[0].append(name)
    if found:
        by = written_by(model)  # which exporter wrote it: the fix is often an option of that exporter
        found = {op: (nodes, f"{detail or _NO_REWRITE}; {by}") for op, (nodes, detail) in found.items()}
        op, (nodes, detail) = next(iter(found.items()))
        raise UnsupportedOperatorError(op, nodes[0], detail, others=found)


_NO_REWRITE = ("no rewrite of schedx covers it: export the model again with it decomposed (another opset, or the "
               "exporter's option to write plain operators), or add a rewrite in explorer/models/")


def written_by(model: onnx.ModelProto) -> str:
    """Which exporter wrote ``model``, from its ``producer_name`` and ``producer_version``."""
    text = f"{model.producer_name} {model.producer_version}".strip()
    return f"written by {text}" if text else "the file names no exporter (no producer_name)"


__all__ = ["check_operators", "directly_handled_ops", "importable_ops", "walk_nodes", "written_by"]
