"""Start MetaSchedule and tensorization in a second, not in twenty.

``import tvm.s_tir.tensor_intrin`` registers every tensor intrinsic TVM ships (CUDA MMA and
WMMA, ARM, Hexagon, ROCm, RISC-V, x86) by parsing hundreds of TVMScript definitions: 17-33 s on
this machine. MetaSchedule's ``TuneContext`` and its default builder import it unconditionally.
Only the intrinsics of the target at hand are needed (x86 takes 0.3 s), so schedx registers the
package without running its ``__init__`` and imports just the target's submodule.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

_PACKAGE = "tvm.s_tir.tensor_intrin"
_BY_KIND = {"llvm": ("x86", "arm_cpu"), "cuda": ("cuda",), "rocm": ("rocm",), "metal": ("metal",)}


def light_tensor_intrin(target_kind: str = "llvm") -> None:
    """Make ``import tvm.s_tir.tensor_intrin`` cheap and register the intrinsics ``target_kind``
    can use. Safe to call many times; does nothing if the full package is already imported."""
    if _PACKAGE not in sys.modules:
        import tvm  # noqa: F401  the parent packages must exist first

        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None:
            return
        stub = importlib.util.module_from_spec(spec)  # the package, without running its __init__
        sys.modules[_PACKAGE] = stub
    for sub in _BY_KIND.get(target_kind, ()):
        name = f"{_PACKAGE}.{sub}"
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # a submodule that cannot load here only loses its intrinsics
                pass
