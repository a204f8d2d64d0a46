"""Checks of a CUDA build that need no GPU (what :meth:`explorer.target.cuda.CudaTarget.device_code` runs).

1. Every PrimFunc handed to code generation is thread-bound: an unscheduled one raises no error
   for a cuda target, its loops silently become host code (see the TVM notes).
2. The generated CUDA source is there, with a ``__global__`` kernel for every PrimFunc.
3. nvcc compiles that source for the target's architecture (a cubin): the source TVM wrote is
   valid CUDA for that GPU.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, dataclass, field

import tvm
from tvm import tirx

from explorer.errors import short_tvm_message
from explorer.ir.tir_walk import walk

_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\(\s*\d+\s*\)\s+)?(\w+)\s*\(")


@dataclass(frozen=True)
class CudaCheck:
    """What the checks found; ``ok`` when nothing is unbound, no kernel is missing and nvcc did not
    fail (not run, with ``--no-nvcc`` or no nvcc on the machine, is no failure: the summary says so)."""

    arch: str
    prim_funcs: int = 0
    kernels: tuple[str, ...] = ()
    unbound: tuple[str, ...] = ()
    missing_kernels: tuple[str, ...] = ()
    source_bytes: int = 0
    nvcc: str = "not run"  # "ok", "failed", "not found", "not run"
    nvcc_error: str = ""
    nvcc_seconds: float = 0.0
    cubin_bytes: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.unbound and not self.missing_kernels and self.source_bytes > 0 and self.nvcc != "failed"

    def summary(self) -> str:
        parts = [f"{len(self.kernels)} CUDA kernels for {self.prim_funcs} PrimFuncs"]
        parts.append(f"unbound: {', '.join(self.unbound)}" if self.unbound else "every PrimFunc thread-bound")
        if self.missing_kernels:
            parts.append(f"no kernel for {', '.join(self.missing_kernels)}")
        nvcc = {"ok": f"nvcc builds it for {self.arch} ({self.cubin_bytes / 1024:.0f} KB cubin, "
                      f"{self.nvcc_seconds:.1f} s)",
                "failed": f"nvcc FAILED for {self.arch}: {self.nvcc_error}",
                "not found": "nvcc not found on PATH: not compiled"}.get(self.nvcc, "nvcc not run")
        parts.append(nvcc)
        return "; ".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ok=self.ok, summary=self.summary())
        return d


def is_thread_bound(func: tirx.PrimFunc) -> bool:
    """Whether some loop of ``func`` is bound to a GPU thread or block axis."""
    for node in walk(func.body):
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
            return True
        if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            return True
    return False


def unbound_prim_funcs(mod: tvm.IRModule) -> list[str]:
    """Names of the PrimFuncs of ``mod`` with no thread-bound loop."""
    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, tirx.PrimFunc) and not is_thread_bound(f))


def cuda_source(executable, module_kind: str = "cuda") -> str:
    """The device source inside a built executable: that of every module of ``module_kind`` (the
    target's kind, as TVM's runtime names its modules) in the import tree."""
    stack = [executable.mod if hasattr(executable, "mod") else executable]
    sources = []
    while stack:
        m = stack.pop()
        if m.kind == module_kind:
            try:
                sources.append(m.inspect_source(module_kind))
            except Exception:  # noqa: BLE001 - a module without source (already compiled)
                pass
        stack.extend(m.imports)
    return "\n".join(sources)


def kernel_names(source: str) -> list[str]:
    return sorted(set(_KERNEL.findall(source)))


def _missing(funcs: list[str], kernels: list[str]) -> list[str]:
    """PrimFuncs with no kernel named after them (TVM names kernels ``<func>_kernel[...]``)."""
    return [f for f in funcs if not any(k == f"{f}_kernel" or k.startswith(f"{f}_kernel") for k in kernels)]


def nvcc_compile(source: str, target: tvm.target.Target) -> bytes:
    """nvcc's cubin of ``source`` for the architecture of ``target`` (raises on failure)."""
    from tvm.support import nvcc

    with target:
        return bytes(nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc"))


def check_cuda(lowered: tvm.IRModule, executable, target: tvm.target.Target, *, compile_with_nvcc: bool = True,
               ) -> tuple[CudaCheck, str, bytes]:
    """Run the checks on a CUDA build: the result, the CUDA source, and the cubin (empty if none)."""
    arch = str(target.attrs.get("arch", "")) if hasattr(target, "attrs") else ""
    funcs = sorted(gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc))
    unbound = unbound_prim_funcs(lowered)
    source = cuda_source(executable)
    kernels = kernel_names(source)
    missing = [f for f in _missing(funcs, kernels) if f not in unbound]
    status, error, seconds, cubin = "not run", "", 0.0, b""
    if compile_with_nvcc and source:
        if shutil.which("nvcc") is None:
            status = "not found"
        else:
            start = time.perf_counter()
            try:
                cubin = nvcc_compile(source, target)
                status = "ok"
            except Exception as err:  # noqa: BLE001 - the check reports nvcc's own words
                text = str(err)
                status, error = "failed", short_tvm_message(text.split("Compilation error:")[-1], 400)
            seconds = time.perf_counter() - start
    check = CudaCheck(arch=arch, prim_funcs=len(funcs), kernels=tuple(kernels), unbound=tuple(unbound),
                      missing_kernels=tuple(missing), source_bytes=len(source.encode()), nvcc=status,
                      nvcc_error=error, nvcc_seconds=seconds, cubin_bytes=len(cubin))
    return check, source, cubin


__all__ = ["CudaCheck", "check_cuda", "cuda_source", "is_thread_bound", "kernel_names", "nvcc_compile",
           "unbound_prim_funcs"]
