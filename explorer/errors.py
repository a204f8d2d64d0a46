"""Exceptions of the compiler side.

Every error raised on purpose by ``explorer`` derives from :class:`ExplorerError`, carries a
message a user can act on, and never hides the original TVM or ONNX exception (it is chained as
``__cause__``). Front ends catch ``ExplorerError`` and show its message; anything else is a bug.
"""

from __future__ import annotations


class ExplorerError(Exception):
    """Base of every error the compiler side raises on purpose."""


class ModelLoadError(ExplorerError):
    """A model could not be read or imported (corrupt file, bad shape spec, unknown source)."""


class UnsupportedOperatorError(ModelLoadError):
    """The importer has no conversion for an operator of the model."""

    def __init__(self, op_type: str, node_name: str, detail: str = "", *,
                 others: dict[str, tuple[list[str], str]] | None = None) -> None:
        """``op_type`` at ``node_name`` (the first found); ``others``: every unsupported operator
        of the model, op -> (its nodes, why), so that one message names them all."""
        self.op_type = op_type
        self.node_name = node_name
        self.unsupported = others or {op_type: ([node_name] if node_name else [], detail)}
        if len(self.unsupported) == 1 and len(self.unsupported[op_type][0]) <= 1:
            where = f" (node {node_name!r})" if node_name else ""
            extra = f": {detail}" if detail else ""
            super().__init__(f"operator {op_type!r}{where} is not supported by TVM's importer{extra}")
            return
        parts = []
        for op, (nodes, why) in self.unsupported.items():
            shown = ", ".join(repr(n) for n in nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
            parts.append(f"{op!r} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}: {shown})"
                         + (f": {why}" if why else ""))
        total = sum(len(nodes) for nodes, _ in self.unsupported.values())
        super().__init__(f"{total} nodes use {len(parts)} operator{'s' if len(parts) != 1 else ''} TVM's importer "
                         f"does not support: " + "; ".join(parts))


class ShapeSpecError(ModelLoadError):
    """A user-given input shape specification could not be parsed or does not fit the model."""


class PipelineError(ExplorerError):
    """A pipeline or pass name is unknown, or a pass raised while running."""


def short_tvm_message(err: BaseException, limit: int = 600) -> str:
    """The useful part of a TVM or ONNX exception: its last non-empty lines, without the C++
    backtrace that TVM prepends, cut to ``limit`` characters."""
    text = str(err).strip() or type(err).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.lstrip().startswith(("File ", "at ", "0x", "Traceback"))
            and not ln.lstrip()[:3].rstrip(":").isdigit()]
    msg = "\n".join(keep[-6:]) if keep else lines[-1]
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."
