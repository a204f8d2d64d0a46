"""The memory side of a kernel's roofline: the bandwidth of where its bytes fit.

A kernel whose arguments fit in the cores' L1 data caches (a reshape, a small mean: what the
kernel before it has just written) moves them at the L1's bandwidth (1000-1360 GB/s on a 2-core
Zen 5 guest, 2.5 times its L2's); one whose arguments fit in the L2 caches reads what the kernel
before it has just written there (small_cnn's max-pool: 80 KB); one whose bytes exceed them but
fit in the shared L3 reads from the L3 (ResNet-18's last bf16 convolutions: 4.7 MB of weights,
priced at the large copy's 25 GB/s they read 107-117 % of their roofline on a Xeon whose L3 holds
480 MB); only bytes beyond every cache come from memory. Each tier's bandwidth is measured on this
machine (:mod:`explorer.measure.cache_peak`, :mod:`explorer.measure.calibration`); a tier without a
figure (0: the OS does not report it) is left out.

A roof is an upper bound, so a kernel's bandwidth is the fastest its bytes could move: as many as the
L1 caches hold at their bandwidth, the rest the L2 caches hold at theirs, the rest the L3 holds at
its, the rest at memory's (mobilenet_v2's depthwise convolution reads a 4.8 MB input its producer
has just written, 4 MB of which can still be in the L2 caches: priced at the L3's bandwidth alone it
read above 100 %). A kernel just past a cache's size is so priced a little below that cache, not at
the next tier's (no cliff at the boundary). Each tier's bandwidth counts at least that of the larger
tiers after it: one measured slower (a busy machine) never lowers a roof.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class CacheTier:
    """One level of cache: ``nbytes`` a kernel can keep there (the usable cores' caches of that level
    together) and the bandwidth it is read at (GB/s, read + written; 0: unknown)."""

    name: str  # "L1", "L2", "L3"
    nbytes: int
    gbps: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MemoryRoof:
    """Every tier of this machine: the caches (smallest first) and memory beyond them."""

    memory_gbps: float  # the large array copy's (explorer.measure.calibration)
    caches: tuple[CacheTier, ...] = ()

    @classmethod
    def of(cls, memory_gbps: float | None, *, l2_gbps: float = 0.0, l2_bytes: int = 0, l3_gbps: float = 0.0,
           l3_bytes: int = 0, l1_gbps: float = 0.0, l1_bytes: int = 0) -> MemoryRoof | None:
        """The tiers from their figures (None without memory's: no roofline at all); the L1 tier only
        where it has a size and a figure."""
        if not memory_gbps:
            return None
        l1 = (CacheTier("L1", l1_bytes, l1_gbps),) if l1_bytes and l1_gbps else ()
        return cls(float(memory_gbps), (*l1, CacheTier("L2", l2_bytes, l2_gbps), CacheTier("L3", l3_bytes, l3_gbps)))

    def known(self) -> tuple[CacheTier, ...]:
        """The caches with a size and a bandwidth, smallest first."""
        return tuple(sorted((t for t in self.caches if t.nbytes > 0 and t.gbps > 0), key=lambda t: t.nbytes))

    def tier_for(self, nbytes: int) -> str:
        """The name of the smallest tier ``nbytes`` fit in: ``L1``, ``L2``, ``L3`` or ``memory``."""
        return next((t.name for t in self.known() if nbytes <= t.nbytes), "memory")

    def gbps_for(self, nbytes: int) -> float:
        """The bandwidth a kernel over ``nbytes`` of arguments can reach at best (see the module
        docstring): ``nbytes`` over the time of moving ``min(nbytes, L1)`` at the L1's bandwidth,
        the rest up to the L2's size at the L2's, up to the L3's at the L3's, the rest at memory's."""
        memory = self.memory_gbps or 0.0
        if nbytes <= 0 or memory <= 0:
            return max([memory, *(t.gbps for t in self.known())])
        tiers = self.known()
        seconds, placed = 0.0, 0
        for i, tier in enumerate(tiers):
            here = min(nbytes, tier.nbytes) - placed  # a larger cache holds the smaller ones' bytes too
            if here > 0:
                seconds += here / max([tier.gbps, memory, *(t.gbps for t in tiers[i + 1:])])
                placed += here
        seconds += (nbytes - placed) / memory
        return nbytes / seconds

    def figure(self, name: str) -> float:
        """The bandwidth of tier ``name`` (``memory`` or a cache's; 0 for one it does not have)."""
        if name == "memory":
            return self.memory_gbps
        return next((t.gbps for t in self.caches if t.name == name), 0.0)

    def with_tier(self, name: str, gbps: float) -> MemoryRoof:
        """This with tier ``name``'s bandwidth set to ``gbps`` (``memory``, or a cache it has)."""
        if name == "memory":
            return replace(self, memory_gbps=float(gbps))
        return replace(self, caches=tuple(replace(t, gbps=float(gbps)) if t.name == name else t for t in self.caches))

    def at_least(self, other: MemoryRoof | None) -> MemoryRoof:
        """This with each tier's bandwidth at least ``other``'s tier of the same name (a cache this has
        no size for is not added)."""
        roof = self
        for name in ("memory", *(t.name for t in self.caches)):
            roof = roof.with_tier(name, max(roof.figure(name), other.figure(name) if other else 0.0))
        return roof

    def text(self, counts: Mapping[str, int] | None = None) -> str:
        """``L2 204 GB/s up to 4.0 MB, L3 45 GB/s up to 480.0 MB, memory 25 GB/s beyond``; with
        ``counts`` (tier name -> how many kernels' bytes fit there) each tier says how many:
        ``L2 204 GB/s up to 4.0 MB (21 kernels), L3 45 GB/s up to 480.0 MB (9), memory 25 GB/s beyond (0)``."""
        from explorer.measure.memory import human

        tiers = [(t.name, f"{t.name} {t.gbps:.0f} GB/s up to {human(t.nbytes)}") for t in self.known()]
        tiers.append(("memory", f"memory {self.memory_gbps:.0f} GB/s" + (" beyond" if tiers else "")))
        if counts is None:
            return ", ".join(text for _, text in tiers)
        return ", ".join(f"{text} ({counts.get(name, 0)}{' kernels' if i == 0 else ''})"
                         for i, (name, text) in enumerate(tiers))

    def to_dict(self) -> dict:
        return {"memory_gbps": self.memory_gbps, "caches": [t.to_dict() for t in self.caches]}


__all__ = ["CacheTier", "MemoryRoof"]
