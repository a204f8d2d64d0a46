"""A memory guard: the bytes a kernel's measurement needs, estimated from its buffer shapes before
anything is allocated, and refused when they exceed a share of the memory that is free.

Without it ``schedx measure matmul:M=30000,N=30000,K=30000`` built its inputs and numpy reference
in the parent until the machine ran out (7.3 GB and climbing). The estimate counts the copies a
measurement really makes (see :func:`measure_bytes`); "free" is what the OS says is available
(``psutil``), capped by the process's cgroup memory limit when it has one (containers).
``SCHEDX_MEMORY_SHARE`` (0 to 1, default 0.75) sets the share.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from explorer.errors import ExplorerError

DEFAULT_SHARE = 0.75
ENV_SHARE = "SCHEDX_MEMORY_SHARE"


class MemoryLimitError(ExplorerError):
    """A kernel needs more memory than this machine has free for it."""


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"


def _cgroup_free() -> int | None:
    """What the cgroup limit leaves (v2 ``memory.max`` minus ``memory.current``, or v1), if any."""
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit) as f:
                text = f.read().strip()
            if not text.isdigit():  # "max": no limit
                continue
            with open(usage) as f:
                used = int(f.read().strip())
            return max(0, int(text) - used)
        except (OSError, ValueError):
            continue
    return None


def free_bytes() -> int:
    """Memory this process can still get: available memory, capped by a cgroup limit."""
    import psutil

    free = int(psutil.virtual_memory().available)
    capped = _cgroup_free()
    return min(free, capped) if capped is not None else free


def share() -> float:
    try:
        value = float(os.environ.get(ENV_SHARE, DEFAULT_SHARE))
    except ValueError:
        return DEFAULT_SHARE
    return value if 0 < value <= 1 else DEFAULT_SHARE


def measure_bytes(input_bytes: int, output_bytes: int) -> int:
    """Peak bytes of measuring a kernel with ``input_bytes`` of inputs and ``output_bytes`` of
    outputs, parent and child together: the parent's inputs and reference plus their pickled
    copy for the child; the child's copy, the device tensors, and the outputs read back."""
    return 4 * input_bytes + 5 * output_bytes


def search_bytes(input_bytes: int, output_bytes: int) -> int:
    """Peak bytes of checking and timing one search candidate in a worker: the task's saved
    reference (inputs and outputs), the candidate's tensors, and its outputs read back."""
    return 2 * input_bytes + 3 * output_bytes


def buffer_bytes(specs: Iterable[tuple[tuple[int, ...], str, bool]]) -> tuple[int, int]:
    """``(input bytes, output bytes)`` of ``(shape, dtype, is_output)`` buffer specs."""
    from explorer.ir.relax_walk import dtype_bytes

    inputs = outputs = 0
    for shape, dtype, is_output in specs:
        n = 1
        for d in shape:
            n *= int(d)
        n = int(n * dtype_bytes(str(dtype)))
        if is_output:
            outputs += n
        else:
            inputs += n
    return inputs, outputs


def check_memory(needed: int, what: str, *, free: int | None = None) -> None:
    """Refuse (:class:`MemoryLimitError`) when ``needed`` bytes exceed the allowed share of the
    free memory; ``what`` names the work in the message."""
    free = free_bytes() if free is None else free
    allowed = share() * free
    if needed > allowed:
        raise MemoryLimitError(
            f"{what} needs about {human(needed)} of memory (inputs, outputs and the reference, with their copies) "
            f"and {human(free)} is free; schedx uses at most {share():.0%} of it ({ENV_SHARE}). Use smaller "
            f"shapes, or free memory first")


__all__ = ["MemoryLimitError", "buffer_bytes", "check_memory", "free_bytes", "human", "measure_bytes",
           "search_bytes", "share"]
