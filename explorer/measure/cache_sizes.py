"""The sizes of this machine's L2 and L3 caches as Linux reports them (``/sys/devices/system/cpu``).

Each CPU lists its caches under ``cpuN/cache/indexM`` (``level``, ``type``, ``size``,
``shared_cpu_list``). A cache that several CPUs share (an L3; an L2 two hyperthreads share) appears
under each of them: it is counted once, by the CPUs that share it. Instruction caches are left out.
Where the tree is missing (not Linux, a container that hides it) every size is 0, and the rooflines
that need one keep the large copy's bandwidth (:mod:`explorer.measure.memory_roof`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


@dataclass(frozen=True)
class CacheUnit:
    """One cache: its level, its bytes, and the CPUs that share it."""

    level: int
    nbytes: int
    cpus: frozenset[int]


def parse_size(text: str) -> int:
    """``48K`` -> 49152; ``2048K``, ``1M``, a plain byte count; 0 for what is not a size."""
    text = text.strip()
    try:
        return int(text[:-1]) * _UNITS[text[-1]] if text[-1:] in _UNITS else int(text or 0)
    except ValueError:
        return 0


def parse_cpu_list(text: str) -> frozenset[int]:
    """``0-1,4`` -> {0, 1, 4} (Linux's ``shared_cpu_list``); empty for what does not parse."""
    cpus: set[int] = set()
    try:
        for part in text.strip().split(","):
            if not part:
                continue
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        return frozenset()
    return frozenset(cpus)


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def cache_units(cpus: frozenset[int] | None = None, root: Path = SYSFS_CPU) -> tuple[CacheUnit, ...]:
    """The data and unified caches of ``cpus`` (default: the usable ones), each once (see the module
    docstring); empty where ``root`` has no cache tree."""
    cpus = usable_cpus() if cpus is None else cpus
    units: dict[tuple[int, frozenset[int]], CacheUnit] = {}
    for cpu in sorted(cpus):
        for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
            try:
                if (index / "type").read_text().strip() == "Instruction":
                    continue
                level = int((index / "level").read_text().strip())
                nbytes = parse_size((index / "size").read_text())
                try:
                    shared = parse_cpu_list((index / "shared_cpu_list").read_text()) or frozenset({cpu})
                except OSError:
                    shared = frozenset({cpu})
            except (OSError, ValueError):
                continue
            if nbytes:
                units.setdefault((level, shared), CacheUnit(level, nbytes, shared))
    return tuple(units.values())


def level_bytes(level: int, units: tuple[CacheUnit, ...]) -> int:
    """The bytes of every cache of ``level`` together (0 where none is reported)."""
    return sum(u.nbytes for u in units if u.level == level)


def level_count(level: int, units: tuple[CacheUnit, ...]) -> int:
    """How many caches of ``level`` there are (an L2 per core, an L3 per socket or per die)."""
    return sum(u.level == level for u in units)


def unit_bytes(level: int, units: tuple[CacheUnit, ...]) -> int:
    """Bytes of one cache of ``level`` (one core's L2; 0 where Linux reports none)."""
    count = level_count(level, units)
    return level_bytes(level, units) // count if count else 0


__all__ = ["CacheUnit", "SYSFS_CPU", "cache_units", "level_bytes", "level_count", "unit_bytes", "parse_cpu_list", "parse_size",
           "usable_cpus"]
