"""Export targets: what a user types (``cpu``, ``cpu:znver4``, ``cuda``, ``cuda:sm_90``) as TVM
target dicts (never CLI strings, see the TVM notes).

The host CPU gets LLVM's name for it and the usable cores. A named CPU is checked against
LLVM's list before anything is built. A CUDA target keeps a *generic* x86-64 host (no ``mcpu``)
so the host half of the library runs on whatever machine holds the GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from explorer.export.errors import TargetError

DEFAULT_CUDA_ARCH = "sm_80"
# Architectures NVIDIA compilers know (CUDA 11-13); nvcc 13 itself builds sm_75 and newer.
CUDA_ARCHES = ("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86",
               "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_110",
               "sm_120", "sm_121")
CUDA_HOST = {"kind": "llvm"}
SPEC_HELP = "cpu, cpu:MCPU (an LLVM CPU name such as znver4), cuda, or cuda:sm_XX (such as sm_80, sm_90)"


@dataclass(frozen=True)
class ExportTarget:
    """A parsed target: ``config`` (and ``host`` for GPUs) is what ``tvm.target.Target`` takes."""

    spec: str
    device: str  # "cpu" or "cuda"
    config: dict
    host: dict | None = None
    is_host_cpu: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def arch(self) -> str:
        return str(self.config.get("arch") or self.config.get("mcpu") or "generic")

    @property
    def label(self) -> str:
        """``llvm znver4 2c`` or ``cuda sm_90``: a few words for tables."""
        if self.device == "cuda":
            return f"cuda {self.arch}"
        cores = self.config.get("num-cores")
        return f"llvm {self.arch}" + (f" {cores}c" if cores else "")

    def tvm_target(self):
        import tvm

        if self.host is not None:
            return tvm.target.Target(self.config, host=self.host)
        return tvm.target.Target(self.config)

    def key(self) -> str:
        """Canonical JSON of the device target (what records carry; host left out)."""
        return json.dumps(self.config, sort_keys=True)

    def to_dict(self) -> dict:
        return {"spec": self.spec, "device": self.device, "config": self.config, "host": self.host,
                "label": self.label, "is_host_cpu": self.is_host_cpu}


def _valid_llvm_cpu(name: str) -> bool:
    from tvm.target import codegen

    triple = codegen.llvm_get_system_triple() if hasattr(codegen, "llvm_get_system_triple") else "x86_64-unknown-linux-gnu"
    try:
        return bool(codegen.llvm_is_valid_cpu(name, triple))
    except Exception:  # noqa: BLE001 - an LLVM without the query accepts the name; the build will tell
        return True


def parse_target(spec: str, *, num_cores: int | None = None) -> ExportTarget:
    """Parse a target spec (see the module docstring); raise :class:`TargetError` naming what is wrong."""
    from explorer.measure.target import host_target

    text = (spec or "").strip()
    kind, _, arg = text.partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    if kind in ("cpu", "llvm"):
        host = dict(host_target(num_cores))
        if not arg or arg == host.get("mcpu"):
            return ExportTarget(text or "cpu", "cpu", host, is_host_cpu=True)
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", arg) or not _valid_llvm_cpu(arg):
            raise TargetError(f"LLVM does not know the CPU {arg!r}; name one LLVM knows, e.g. znver4, "
                              f"skylake-avx512, icelake-server, x86-64-v3 (this machine is "
                              f"{host.get('mcpu', 'generic')})")
        config = {"kind": "llvm", "mcpu": arg, "num-cores": host["num-cores"]}
        return ExportTarget(text, "cpu", config, notes=(
            f"built for CPU {arg}; it runs here only if this machine has that CPU's instruction set",))
    if kind == "cuda":
        arch = (arg or DEFAULT_CUDA_ARCH).lower()
        if re.fullmatch(r"\d+a?", arch):
            arch = f"sm_{arch}"
        if arch not in CUDA_ARCHES:
            raise TargetError(f"unknown CUDA architecture {arg!r}; use one of {', '.join(CUDA_ARCHES)} "
                              f"(sm_80 = A100, sm_86 = RTX 30xx, sm_89 = L4/RTX 40xx, sm_90 = H100)")
        return ExportTarget(text, "cuda", {"kind": "cuda", "arch": arch}, host=dict(CUDA_HOST))
    raise TargetError(f"unknown target {spec!r}: use {SPEC_HELP}")


__all__ = ["CUDA_ARCHES", "DEFAULT_CUDA_ARCH", "ExportTarget", "SPEC_HELP", "parse_target"]
