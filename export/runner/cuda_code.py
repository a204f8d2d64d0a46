"""A CUDA bundle's kernels on the GPU found here: TVM's CUDA runtime made available (a runtime-only
TVM loads none), and the code it asks for when the library loads: the bundle's own cubin, or the
source compiled for this GPU. Part of a bundle's ``run.py`` (:mod:`export.runner`)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from export.runner.bundle_check import BundleCheckError

def cuda_compile_mode() -> str:
    """How TVM will compile the CUDA source when the library loads: NVRTC needs ``cuda-python``;
    without it, nvcc (when on PATH) is chosen through ``TVM_CUDA_COMPILE_MODE``."""
    import importlib.util
    import shutil

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if not mode:
        mode = "nvrtc" if importlib.util.find_spec("cuda") is not None or not shutil.which("nvcc") else "nvcc"
        os.environ["TVM_CUDA_COMPILE_MODE"] = mode
    return mode


def load_cuda_runtime() -> bool:
    """Make TVM's CUDA runtime available; True when ``tvm.cuda(0)`` exists afterwards.

    A full TVM loads its CUDA library (``libtvm_runtime_cuda.so``, beside ``libtvm_runtime.so``) when
    imported; a runtime-only TVM (``TVM_USE_RUNTIME_LIB=1``, or an install without the compiler)
    loads no device library, so ``tvm.cuda(0)`` would not exist even on a machine with a GPU."""
    import ctypes

    import tvm

    loaded = getattr(tvm.base, "_LOADED_LIBS", {})
    if "tvm_runtime_cuda" not in loaded and "tvm_runtime" in loaded:
        library = Path(loaded["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"
        if library.exists():
            try:
                loaded["tvm_runtime_cuda"] = ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL)
            except OSError:  # no NVIDIA driver (libcuda.so.1) on this machine: no CUDA device
                pass
    return bool(tvm.cuda(0).exist)


def cuda_code_loader(folder: str | os.PathLike, manifest: dict, used: list | None = None, arch: str | None = None):
    """The function TVM's CUDA runtime calls (``tvm_callback_cuda_compile``) with the kernels' source
    when the library loads: the bundle's own cubin when the source is the one it was built from and
    the GPU is of its architecture (nothing to compile, no compiler needed), else the source
    compiled for the GPU found here (NVRTC with ``cuda-python``, or nvcc: :func:`cuda_compile_mode`).
    TVM's own callback reads the compile target from its compiler, which a runtime-only TVM lacks.
    What it did is appended to ``used``; ``arch`` (``sm_90``) stands for the GPU's own."""
    folder = Path(folder)
    files = manifest.get("files", {})
    source_sha = next((info["sha256"] for info in files.values() if info.get("role") == "cuda-source"), None)
    cubins = {name for name, info in files.items() if info.get("role") == "cubin"}
    log = used if used is not None else []

    def load_code(code) -> bytes:
        import tvm

        text = code.decode() if isinstance(code, (bytes, bytearray)) else str(code)
        gpu = arch or "sm_" + str(tvm.cuda(0).compute_version).replace(".", "")
        shipped = f"kernels_{gpu}.cubin"
        if shipped in cubins and hashlib.sha256(text.encode()).hexdigest() == source_sha:
            log.append(f"the bundle's {shipped} (built at export; nothing compiled here)")
            return (folder / shipped).read_bytes()
        start = time.perf_counter()
        binary, how = compile_cuda(text, gpu)
        log.append(f"the source compiled here for {gpu} with {how} ({time.perf_counter() - start:.1f} s)")
        return binary

    return load_code


# nvcc's options as TVM's own CUDA compile passes them (half and bfloat16 operators, fast math)
NVCC_OPTIONS = ("-O3", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                 *(f"-U__CUDA_NO_{kind}_{what}__" for kind in ("HALF", "BFLOAT16", "BFLOAT162")
                   for what in ("OPERATORS", "CONVERSIONS")))


def compile_cuda(source: str, arch: str) -> tuple[bytes, str]:
    """A cubin of ``source`` for ``arch`` and the compiler used: nvcc itself where it is chosen
    (``TVM_CUDA_COMPILE_MODE=nvcc``) or where a runtime-only TVM has no compiler to ask, else TVM's
    NVRTC path (which reads the target from TVM's compiler, so it runs in a target scope)."""
    import shutil
    import subprocess
    import tempfile

    import tvm

    nvcc = shutil.which("nvcc")
    if nvcc and (cuda_compile_mode() == "nvcc" or getattr(tvm.base, "_RUNTIME_ONLY", False)):
        with tempfile.TemporaryDirectory(prefix="schedx-cuda-") as tmp:
            src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.cubin"
            src.write_text(source)
            proc = subprocess.run([nvcc, "--cubin", f"-arch={arch}", *NVCC_OPTIONS, "-o", str(out), str(src)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise BundleCheckError(f"nvcc could not compile the kernels for {arch}: "
                                       f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
            return out.read_bytes(), "nvcc"
    from tvm.support import nvcc as tvm_nvcc

    with tvm.target.Target({"kind": "cuda", "arch": arch}):
        return bytes(tvm_nvcc.compile_cuda(source, target_format="cubin", arch=arch, compiler="nvrtc")), "nvrtc"


__all__ = ["NVCC_OPTIONS", "compile_cuda", "cuda_code_loader", "cuda_compile_mode", "load_cuda_runtime"]
