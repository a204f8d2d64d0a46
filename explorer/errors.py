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

    def __init__(self, op_type: str, node_name: str, detail: str = "") -> None:
        self.op_type = op_type
        self.node_name = node_name
        where = f" (node {node_name!r})" if node_name else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"operator {op_type!r}{where} is not supported by TVM's importer{extra}")


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
