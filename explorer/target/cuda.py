"""The CUDA kind: an NVIDIA GPU of architecture ``sm_XX`` with a generic host CPU half. Its
spellings (``cuda``, ``cuda:sm_XX``, ``cuda:90``, ``{"kind": "cuda", "arch": ...}``), its target
object and its bundle's device checks (:mod:`explorer.target.cuda_check`: thread binding, the
generated source, nvcc) all live here; registered in :mod:`explorer.target.kinds`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from explorer.target.kind import TargetKind
from explorer.target.model import DeviceCode, Target, TargetError

DEFAULT_CUDA_ARCH = "sm_80"
CUDA_INTRINSICS = ("cuda",)  # the submodule of tvm.s_tir.tensor_intrin with NVIDIA's intrinsics
# Architectures NVIDIA compilers know (CUDA 11-13); nvcc 13 itself builds sm_75 and newer.
CUDA_ARCHES = ("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86",
               "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_110",
               "sm_120", "sm_121")


@dataclass(frozen=True)
class CudaTarget(Target):
    """An NVIDIA GPU of architecture ``sm_XX``, with a generic host CPU half."""

    kind: ClassVar[str] = "cuda"
    device: ClassVar[str] = "cuda"
    default_schedule: ClassVar[str] = "dlight's default GPU schedules"
    runnable_fix: ClassVar[str] = "use --target cuda on a machine with a GPU"
    run_elsewhere: ClassVar[str] = "with `python -m export.gpu_check DIR` on the machine with the GPU"
    bundle_note: ClassVar[str] = (
        "The CUDA kernels are carried as source (`kernels.cu`) and as nvcc's build of it for the target's "
        "architecture (`kernels_sm_XX.cubin`). `run.py` loads that cubin on a GPU of that architecture (no "
        "compiler needed, a runtime-only TVM will do); on another GPU it compiles the source for it, with "
        "NVRTC (`pip install cuda-python`) or nvcc (`TVM_CUDA_COMPILE_MODE=nvcc`). On the machine with the "
        "GPU: `python -m export.gpu_check .` (schedx) or `python run.py --device cuda`.")
    bundle_files: ClassVar[tuple[str, ...]] = ("kernels.cu", "kernels_*.cubin")  # what device_code adds

    @property
    def label(self) -> str:
        return f"cuda {self.arch}"

    def accepts(self, record_target: str) -> bool:
        """Records of the same GPU architecture, whatever else a GPU target's text holds."""
        try:
            config = json.loads(record_target)
        except (TypeError, ValueError):
            return False
        return isinstance(config, dict) and config.get("kind") == self.config["kind"] and config.get("arch") == self.arch

    @property
    def record_targets(self) -> tuple[str, ...]:
        return (self.key, self.config["kind"])  # the kind alone: GPU records may carry extra target keys

    def why_not_here(self) -> str:
        import tvm

        return "" if tvm.cuda(0).exist else "this machine has no CUDA GPU"

    @property
    def stand_in(self) -> str:
        return "the CUDA checks stand in; `python -m export.gpu_check DIR` runs it on the GPU machine"

    @property
    def triple(self) -> str | None:
        return (self.host or {}).get("mtriple")

    @property
    def intrinsics(self) -> tuple[str, ...]:
        return CUDA_INTRINSICS

    def lowering_passes(self, tvm_target) -> list:
        from tvm.relax.backend.cuda import pipeline

        return list(pipeline.dataflow_lower_passes(tvm_target)) + list(pipeline.finalize_passes(tvm_target))

    def apply_default_schedules(self, mod, tvm_target, safe: frozenset[str] = frozenset(), *,
                                task_names: Mapping[str, str] = {}, tune_commands: Mapping[str, str] = {}) -> tuple:
        """dlight's rules, which bind threads, kernel by kernel (see :mod:`explorer.schedule.defaults.gpu`;
        its notes name functions, and schedx does not search GPU targets: ``task_names`` and
        ``tune_commands`` go unused)."""
        from explorer.schedule.defaults.gpu import apply_gpu_defaults

        return (*apply_gpu_defaults(mod, tvm_target), {})

    def device_code(self, lowered, executable, *, compile: bool = True) -> DeviceCode:
        """Thread binding, a kernel per PrimFunc and nvcc's build (:func:`explorer.target.cuda_check.check_cuda`);
        the bundle carries the source (``kernels.cu``) and the cubin (``kernels_sm_XX.cubin``)."""
        from explorer.target.cuda_check import check_cuda

        check, source, cubin = check_cuda(lowered, executable, self.tvm(), compile_with_nvcc=compile)
        files = {"kernels.cu": ("cuda-source", source.encode())}
        if cubin:
            files[f"kernels_{self.arch}.cubin"] = ("cubin", cubin)
        return DeviceCode("the CUDA checks", check, files)


class CudaKind(TargetKind):
    name = "cuda"
    target_class = CudaTarget
    words = ("cuda",)
    json_kinds = ("cuda",)
    tvm_keys = ("cuda", "gpu")
    help = "cuda, cuda:sm_XX"
    choices = ("cuda:sm_80", "cuda:sm_90")
    title = "CUDA (--target cuda:sm_XX; code is checked and compiled with nvcc, run on a GPU machine)"
    intrinsic_modules = CUDA_INTRINSICS

    def parse(self, text: str, head: str, arg: str, *, cores: int | None) -> Target:
        arch = (arg or DEFAULT_CUDA_ARCH).strip().lower()
        if re.fullmatch(r"\d+a?", arch):
            arch = f"sm_{arch}"
        if arch not in CUDA_ARCHES:
            raise TargetError(f"unknown CUDA architecture {arg!r}; use one of {', '.join(CUDA_ARCHES)} "
                              f"(sm_80 = A100, sm_86 = RTX 30xx, sm_89 = L4/RTX 40xx, sm_90 = H100)")
        # a generic host half (no mcpu): it runs on whatever machine holds the GPU
        return CudaTarget(text, arch, {"kind": "cuda", "arch": arch}, host={"kind": "llvm"})

    def parse_json(self, text: str, config: dict, *, cores: int | None) -> Target:
        target = self.parse(text, "cuda", str(config.get("arch", "")).strip(), cores=cores)
        extra = {k: v for k, v in config.items() if k not in ("kind", "arch", "host")}
        return replace(target, config={**target.config, **extra})

    def listing(self) -> list[dict]:
        import tvm

        gpu = bool(tvm.cuda(0).exist)
        return [{"spec": f"cuda:{a}", "runs_here": gpu, "why_not_here": "" if gpu else "this machine has no CUDA GPU"}
                for a in CUDA_ARCHES]


CUDA = CudaKind()

__all__ = ["CUDA", "CUDA_ARCHES", "CUDA_INTRINSICS", "CudaKind", "CudaTarget", "DEFAULT_CUDA_ARCH"]
