"""torchvision and timm importable beside a CPU-only torch.

The package index here offers torchvision built for CUDA torch only; its compiled ops (``_C``)
then fail to load, and importing torchvision fails where it registers fake kernels for two ops
the missing library would have defined. The corpus needs only torchvision's model definitions
(pure Python), so the two op schemas are defined first when the library is absent.
"""

from __future__ import annotations

import torch


def _define_missing_ops() -> None:
    if hasattr(torch.ops, "torchvision") and hasattr(torch.ops.torchvision, "nms"):
        return
    try:
        lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 - kept alive below
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(lib)
    except RuntimeError:  # already defined by the real library
        pass


_KEEP: list = []
try:
    import torchvision  # noqa: F401
except RuntimeError:
    _define_missing_ops()
    import torchvision  # noqa: F401,E402
import timm  # noqa: E402

__all__ = ["timm", "torchvision"]
