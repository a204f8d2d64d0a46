"""Targets: the one parser of what a user types (``cpu``, ``cpu:MCPU``, ``cuda:sm_XX``,
``aarch64``, JSON), the one host detection (from the CPU's real features), and the target
objects, one class per kind, that know how they build, name themselves in records and whether
this machine can run their code."""

from explorer.target.arches import CPU_ARCHES, CpuArch
from explorer.target.canonical import canonical_target
from explorer.target.host import HostCPU, detect_host, host_cpu
from explorer.target.model import CUDA_ARCHES, DEFAULT_CUDA_ARCH, CpuTarget, CudaTarget, Target, TargetError
from explorer.target.overview import targets_overview
from explorer.target.parse import (SPEC_HELP, host_target, intrinsics_of, known_cpus, parse_target,
                                   record_mismatch)

__all__ = ["CPU_ARCHES", "CUDA_ARCHES", "CpuArch", "CpuTarget", "CudaTarget", "DEFAULT_CUDA_ARCH", "HostCPU",
           "SPEC_HELP", "Target", "TargetError", "canonical_target", "detect_host", "host_cpu", "host_target",
           "intrinsics_of", "known_cpus", "parse_target", "record_mismatch", "targets_overview"]
