"""What a register tile costs, in cycles per vector multiply-add, on a simple model of a core:
its loads from L1 and L2, the FMA latency its accumulators hide, and a workspace allocation where
its accumulator is too large for the stack."""

from __future__ import annotations

# A core's L1 data cache, the smallest common size (32 KB: Haswell to Skylake, Zen 1-4; 48 KB on
# Ice Lake and later and Zen 5, more on Apple's cores): a tile whose column of weights is larger
# reads them from L2 (see cycles_per_fma).
L1_BYTES = 32 * 1024

# Vectors a core brings from L2 per cycle, sustained: 64 bytes a cycle is the peak on Skylake-X and
# Zen 4, about 3/4 of it under FMA load. At the peak a 2-row tile whose weights stream from L2
# (1 vector per 2 multiply-adds) costs as little as the FMA bound and tied with 7-row tiles;
# measured 1.35x slower (ResNeSt's 14x14 grouped 3x3 conv, 2x128 11.0 ms against 7x32 8.2).
L2_VECTORS_PER_CYCLE = 0.75

# TVM keeps a "global" buffer below this size on the stack (``kMaxStackAlloca``); a larger one, or
# one in any other scope, is allocated from the runtime's workspace pool inside the parallel loop,
# once per tile: an allocate and a free call, about WORKSPACE_CYCLES together (measured on an AVX2
# Zen 3: MobileNetV2's 112x112 1x1 conv, K = 16, 4x16 tiles in "local" scope 0.93 ms, in "global"
# 0.35 ms, 62 ns per tile).
STACK_BYTES = 1024
WORKSPACE_CYCLES = 200
ALLOC_SHARE = 0.05
# Independent accumulators that keep two FMA units busy. Their latency (4 cycles on Zen 3 and
# Skylake) asks for 8, but 8 leave no slack for a late load: measured on an AVX2 Zen 3 (2 cores),
# 3x3 convs, weights packed, in turns: 6x16 tiles (12 accumulators) against 2x32 (8) 163 against 126
# GFLOPS at 48x48x64; with a tail of rows (ResNet-18's widths have no factor 3), 56x56x64 1.22x,
# 28x28x128 1.06x, 14x14x256 1.06x, and against 7x8 at 7x7x512 1.14x.
FMA_CHAINS = 12
# What a tail of rows costs per output vector besides its tiles: the output is stored, loaded and
# written back again in a pass of its own (see tile_loops.tile_with_tail), often from memory.
# Against a short reduction that is more than the wider tile saves (AVX2 Zen 3: ResNet-18's 3x3 max pool 0.15 ->
# 0.23 ms; MobileNetV2's 1x1 convs over 16-32 channels at 112x112 and 56x56 1.5-2x slower; its stem,
# 3x3x3, 1.46x), against ResNet's 3x3 convs (reductions of 576 and more) it is lost in the noise.
# 32 kept whole tiles on reductions of 147-160 as well, where the tail pays: at 16, ResNet-18's
# 7x7x3 stem 1.50 -> 1.46 ms (6x16 and a 4x16 tail against 2x32), MobileNetV2's 7x7 1x1 conv over
# 160 channels 0.53 -> 0.31 ms (rows over 7x7 outputs); the models 21.31 -> 21.08 and 4.78 -> 4.60
# ms (AVX2 Zen 3, 2 cores, one process, 8 alternated rounds; 8 made ResNet's 1x1 convs slower).
TAIL_PASS_CYCLES = 16.0


def cycles_per_fma(rt: int, nv: int, column_bytes: int, reduction: int = 1 << 20, tile_bytes: int = 0,
                   broadcast: int = 1) -> float:
    """A register tile's cost in cycles per vector multiply-add, from a simple machine: two FMAs
    and two loads per cycle (L1), and :data:`L2_VECTORS_PER_CYCLE` from L2. A tile loads ``rt`` broadcasts
    and ``nv`` weight vectors for ``rt * nv`` multiply-adds; when its column of weights (all the
    reduction steps) does not stay in L1, every weight vector comes from L2 and serves ``rt`` rows.
    Each accumulator is a chain of dependent multiply-adds: fewer than ``FMA_CHAINS`` leave the
    FMA units waiting. A broadcast costs ``broadcast`` loads: 2 where it is an instruction of its
    own (x86 before AVX-512: tiles of many rows run slower than their load counts say).
    An accumulator of ``tile_bytes`` too large for the stack costs a workspace allocation per tile,
    spread over its ``reduction * rt * nv`` multiply-adds; counted only from ``ALLOC_SHARE`` of the
    tile's time up (short reductions: 1x1 convs over few channels on AVX-512), below which this
    model cannot tell it from noise and the load counts decide as before."""
    l1 = (broadcast * rt + nv) / (2 * rt * nv)
    l2 = 1 / (rt * L2_VECTORS_PER_CYCLE) if column_bytes > L1_BYTES else 0.0
    latency = FMA_CHAINS / (2 * rt * nv)
    cycles = max(0.5, l1, l2, latency)
    alloc = WORKSPACE_CYCLES / (reduction * rt * nv) if tile_bytes >= STACK_BYTES else 0.0
    return cycles + alloc if alloc >= ALLOC_SHARE * cycles else cycles


__all__ = ["ALLOC_SHARE", "FMA_CHAINS", "L1_BYTES", "L2_VECTORS_PER_CYCLE", "STACK_BYTES", "TAIL_PASS_CYCLES",
           "WORKSPACE_CYCLES", "cycles_per_fma"]
