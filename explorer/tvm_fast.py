"""Start TVM and MetaSchedule in a second, not in twenty.

Two costs that every process touching TVM pays, and that schedx avoids:

- ``import tvm_ffi`` (and ``tvm.relax``) import torch whenever torch is installed (a
  work-around for a Windows symbol clash, and DLPack fast paths): 0.7-1.0 s on this machine, in the main process and again in every build and
  measurement worker. :func:`hold_back_torch` makes that one import fail quietly; torch stays
  importable for everything else (the PyTorch model route imports it when it needs it).
- ``import tvm.s_tir.tensor_intrin`` registers every tensor intrinsic TVM ships (CUDA MMA and
  WMMA, ARM, Hexagon, ROCm, RISC-V, x86) by parsing hundreds of TVMScript definitions: 17-33 s
  here. MetaSchedule's ``TuneContext`` and its default builder import it unconditionally. Only
  the intrinsics of the target at hand are needed (x86: 0.13 s, ARM: 0.6 s), so
  :func:`light_tensor_intrin` registers the package without running its ``__init__`` and
  imports just the target's submodule.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_PACKAGE = "tvm.s_tir.tensor_intrin"


# Modules of TVM that import torch at start-up for features schedx does not use (torch DLPack
# fast paths, Python-defined modules mixing torch and TVM).
_TORCH_AT_IMPORT = {"tvm.relax.base_py_module"}


class _TorchForTvmFfi(importlib.abc.MetaPathFinder):
    """Refuses ``import torch`` when the importer is ``tvm_ffi`` or a module in
    ``_TORCH_AT_IMPORT``; defers to the other finders otherwise."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "") if frame is not None else ""
        if importer.split(".")[0] == "tvm_ffi" or importer in _TORCH_AT_IMPORT:
            raise ModuleNotFoundError("schedx keeps torch out of tvm_ffi's start-up (see explorer.tvm_fast)",
                                      name="torch")
        return None


def hold_back_torch() -> None:
    """Keep ``tvm_ffi`` from importing torch at start-up (see the module docstring). Idempotent;
    harmless once TVM is imported (it then changes nothing)."""
    if not any(isinstance(f, _TorchForTvmFfi) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchForTvmFfi())


def light_tensor_intrin(modules: tuple[str, ...] | None = None) -> None:
    """Make ``import tvm.s_tir.tensor_intrin`` cheap and register the intrinsics of ``modules``
    (its submodules a target uses: :attr:`explorer.target.Target.intrinsics`; None: this machine's
    CPU). Safe to call many times; does nothing if the full package is already imported."""
    if modules is None:
        from explorer.target.arches import cpu_intrinsics, host_arch

        modules = cpu_intrinsics(host_arch())
    if _PACKAGE not in sys.modules:
        import tvm  # noqa: F401  the parent packages must exist first

        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None:
            return
        stub = importlib.util.module_from_spec(spec)  # the package, without running its __init__
        sys.modules[_PACKAGE] = stub
    for sub in modules:
        name = f"{_PACKAGE}.{sub}"
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # a submodule that cannot load here only loses its intrinsics
                pass
