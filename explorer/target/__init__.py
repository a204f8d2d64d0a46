"""Targets: the one parser of what a user types (``cpu``, ``cpu:MCPU``, ``cuda:sm_XX``,
``aarch64``, JSON), the one host detection (from the CPU's real features), the registry of target
kinds (:mod:`explorer.target.kinds`) and CPU architectures (:mod:`explorer.target.arches`), and
the target objects, one class per kind, that know how they build, check their bundles, name
themselves in records and whether this machine can run their code."""

from explorer.target.arches import CPU_ARCHES, CpuArch, arch_registered, register_arch, unregister_arch
from explorer.target.canonical import canonical_target
from explorer.target.cpu import host_target, known_cpus
from explorer.target.cuda import CUDA_ARCHES, DEFAULT_CUDA_ARCH, CudaTarget
from explorer.target.host import HostCPU, detect_host, host_cpu
from explorer.target.kinds import (TargetKind, kind_registered, register_kind, spec_help, target_choices,
                                   target_kinds, unregister_kind)
from explorer.target.model import CpuTarget, DeviceCode, Target, TargetError
from explorer.target.overview import targets_overview
from explorer.target.parse import intrinsics_of, parse_target, record_mismatch

__all__ = ["CPU_ARCHES", "CUDA_ARCHES", "CpuArch", "CpuTarget", "CudaTarget", "DEFAULT_CUDA_ARCH", "DeviceCode",
           "HostCPU", "Target", "TargetError", "TargetKind", "arch_registered", "canonical_target", "detect_host",
           "host_cpu", "host_target", "intrinsics_of", "kind_registered", "known_cpus", "parse_target",
           "record_mismatch", "register_arch", "register_kind", "spec_help", "target_choices", "target_kinds",
           "targets_overview", "unregister_arch", "unregister_kind"]
