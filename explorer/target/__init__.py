"""Targets: the one parser of what a user types (``cpu``, ``cpu:MCPU``, ``cuda:sm_XX``,
``aarch64``, JSON), the one host detection (from the CPU's real features), and the target object
that knows how it builds, names itself in records and whether this machine can run its code."""

from explorer.target.host import HostCPU, detect_host, host_cpu
from explorer.target.model import (CUDA_ARCHES, DEFAULT_CUDA_ARCH, SPEC_HELP, Target, TargetError, canonical_target,
                                   host_target, known_cpus, parse_target, record_mismatch)
from explorer.target.overview import targets_overview

__all__ = ["CUDA_ARCHES", "DEFAULT_CUDA_ARCH", "HostCPU", "SPEC_HELP", "Target", "TargetError", "canonical_target",
           "detect_host", "host_cpu", "host_target", "known_cpus", "parse_target", "record_mismatch", "targets_overview"]
