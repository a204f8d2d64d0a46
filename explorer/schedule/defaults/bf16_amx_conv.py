"""Default schedule of a direct bf16 convolution (``conv2d_nhwc_bf16``,
:mod:`explorer.passes.bf16_conv_nhwc`) on AMX-BF16 tiles (:mod:`explorer.schedule.amx_bf16_conv`),
the int8 AMX rule's shape (:mod:`.int8_amx`):

    parallel(n, h, w / rows, o / (16 nt)) . [rows x 16 nt over all taps and channels: one AMX call]
    then, in the same parallel iteration, the epilogue of that tile (bias, residual add, relu)

with the output channels outermost instead where the weights outweigh the input (ResNet's last
stages: each core streams its share of the weights once, not once per output row). A kernel tiled
across rows (loops n, p, o, rh, rw, c: a 7x7 map) gets tiles of 16 pixels, two where they divide,
its row copy and epilogue after it (its tiles are no box of output pixels); where the weights
outweigh the input, per panel of output channels, after the panel's calls in the same parallel
iteration (:data:`FLAT_EPILOGUE_PER_PANEL`). A call's C tiles are a
column of 4 x 1 where the pixels allow and the input outweighs the weights (:data:`TALL_GRID`), else
2 x 2; where the weights outweigh the input and a row fills one tile, a call takes two whole output
rows (``parallel(n, h / 2, o / 32)``, :data:`ROWS_A_CALL`); a 1x1 one with more rows than a call runs its
rows outermost instead, a band of rows a core (:data:`ROW_BANDS_1X1`), a band of 3-7 rows one call
(:data:`BAND_A_CALL_1X1`); a call over all of a 7-row map takes 16-channel panels where 32-channel ones
would split unevenly among the cores (:data:`EVEN_PANELS_ODD_ROWS`). Where the input outweighs the
weights, one call takes several grids of tiles (:data:`GROUPED_CALLS`), more where its epilogue adds a
residual map (:data:`RESIDUAL_CALL_SUMS`). The call's own
``tilezero`` is the sums' init: the tile block is decomposed and its init tensorized into no code
(:func:`explorer.schedule.amx_bf16_conv.register_zero`), trace steps a replay repeats. The packing
block (``bf16_nhwc_input``: the input rounded and padded) runs its rows in parallel, channels
vectorized (where they fill no vector, the input's box of rows and columns apart from the padding:
:data:`PACK_INSIDE_APART`), before; a 1x1 kernel whose input outgrows L2, or is strided, packs
the rows a chunk of calls reads in that chunk instead (:data:`PACK_PER_CALL`), and a weights-heavy kernel tiled across
rows all of its input in each core's share of the panels (:data:`PACK_PER_CORE`), a weights-heavy 1x1 over
whole rows the rows each core's share reads in that share (its band; all of them on a 7-row map), and one
over a map of one padded row the pixels of its band, one a core (:data:`BANDS_ONE_ROW_1X1`); a packing done
once over one row runs its pixels in parallel (:data:`PACK_ONE_ROW_BY_PIXELS`).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from tvm import s_tir

from explorer.passes.bf16_conv_nhwc import FLAT_ATTR, INPUT_NAME, INSIDE_ATTR, ROW_STRIDE_ATTR
from explorer.schedule.amx_bf16_conv import K_CHANNELS, AmxBf16Conv, register, row_taps_fit
from explorer.schedule.defaults.amx_calls import MAX_CALL_SUMS, MIN_CALLS_PER_CORE, call_fits, most_dividing, zero_init
from explorer.schedule.amx_ir import TILE_REGISTERS
from explorer.schedule.amx_int8 import GRIDS
from explorer.schedule.bf16_dot import PANEL
from explorer.schedule.defaults.analysis import NotApplicable, block_facts, root_blocks
from explorer.schedule.defaults.epilogue import epilogue_per_tile, epilogue_reads_a_map, vectorize_epilogue
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.llvm_import import IMPORT_LLVM

# One call computes several grids of tiles (more pixels of the output row, more channels), loading
# the tile configuration once and allocating one buffer of sums: 3x3 64 -> 64 @56, one thread,
# 0.201-0.207 -> 0.191-0.200 ms (the 7x7 stem level: in perf its wait moved from the ldtilecfg to
# the tile loads). False: one grid a call, as before.
GROUPED_CALLS = True
# A call's C tiles a column of TALL_GRID x 1 (one panel of 16 channels), not 2 x 2, where the
# pixels allow and the input outweighs the weights (calls grouped over all of a pixel's channels):
# each B tile then feeds 4 tdpbf16ps instead of 2, the A tiles taking two registers in turn
# (amx_ir.a_registers). The kernel alone, looped (one thread, CPU time, best of 9-11 alternated
# rounds, load 3-5): 3x3 64 @56 0.159 / 0.151 -> 0.148 / 0.137 ms; in the model (`schedx profile
# --threads 1`, 3 rounds each, load 4-5) layer1's 3x3 convs 0.479-0.511 -> 0.464-0.504 ms. Not where
# the weights outweigh the input: looped, 3x3 512 @7 (flat, 64 pixels a call) was 4% faster and 3x3
# 128 @28 (two rows a call) 6%, but in the model 0.62-0.69 -> 0.74-1.02 ms and 0.43-0.45 -> 0.47-0.51
# ms (their B tiles streamed from L3 one panel at a time, 64 bytes of each output pixel a call). Nor
# for kernel rows as tile rows (the stem: 28-byte B tiles, the A loads dominate: 0.325 -> 0.407 ms)
# or 7-row tiles (3x3 128 @28 as 7 x 4: 0.171 -> 0.244 ms). 0: 2 x 2 grids everywhere, as before.
TALL_GRID = 4
# Weights-heavy kernels whose output rows fill one tile each (14-pixel rows) take two whole rows a
# call as a 2 x 2 grid (AmxBf16Conv.out_rows: each B tile feeds two products, not one): looped, 3x3
# 128 -> 256 s2 @14 0.091 -> 0.082 ms; in the model (layer3.0's, 3 rounds each) 0.134-0.147 ->
# 0.127-0.136 ms. Not where the input outweighs the weights (those calls are
# grouped instead: 3x3 64 -> 128 s2 @28 as two rows 0.091 -> 0.101 ms). False: one row a call.
ROWS_A_CALL = True
# 1x1 kernels too (amx_bf16_conv's rows description without tap axes): MobileNetV2's two-product
# expansions 64 -> 384 and 96 -> 576 @14 alone (one thread, 9 alternated rounds, load 1.3) 0.91x and
# 0.93x; in the model (one thread, 7 rounds, load 2.8) 0.93x both, 160 -> 960 and 320 -> 1280 @7 0.79x
# and 0.86x (all 7 rows a call); ResNet-18's layer4.0 1x1 downsample 0.87x, the model level (4.64 /
# 4.67 ms of kernels). False: 1x1 kernels one row a call, as before.
ROWS_A_CALL_1X1 = True
# Where those rows are odd in number (up to this many), one call takes them all: the 2 x 2 grid over
# each pair of rows, the last row a 1 x 2 grid, one ldtilecfg. ResNet-18's layer4.0 3x3 256 -> 512
# s2 @7 alone, looped (one thread, 15 alternated rounds, load 3.4): 0.202 -> 0.154 ms best, 0.214 ->
# 0.167 median; in the model (`schedx profile resnet18 --precision bf16 --no-db`, 3 alternated fresh
# processes each, load 3-5.7): 1 thread 0.253 -> 0.214-0.232 ms, 2 threads 0.258-0.276 -> 0.230-0.256.
# 0: one row a call there, as before.
ODD_ROWS_A_CALL = 7
# A 1x1 kernel's input packed (rounded to bf16, padded) by the calls that read it, a chunk of calls
# at a time, where packing it once streams it through L3 (its fp32 rows and their bf16 copy over
# PACK_ONCE_BYTES, the L2 of the AMX CPUs) or packs rows a stride skips. One thread, alternated rounds,
# load 4-5: MobileNetV2's 1x1 144 -> 24 @56 (63% of it the packing, in perf) alone 0.111 -> 0.077 ms,
# in the model 0.159-0.171 -> 0.108-0.110 ms. A chunk holds at least PACK_CHUNK_BYTES of bf16 rows: a
# row a call was slower (a tile load of rows just stored waits for them: 144 -> 24 @56 0.095 ms, and
# 192 -> 32 @28, packed per call though it fits L2, 0.017 -> 0.030 ms; 7 rows a chunk 0.018).
# False: every input packed once, before the calls.
PACK_PER_CALL = True
# A kernel is weights-heavy (output channels outermost, no grouped calls: weights_outweigh_input) where
# its packed weights exceed this many times its packed input. ResNet-18's layer2 3x3 128 -> 128 @28
# (weights 295 KB, 1.28x its 230 KB input) runs input-first at 1.5, a call over a whole output row
# and all 128 channels (1 x 4 grids): in the model (3 bundles alternated, 8 rounds, load 5-6)
# 0.507 -> 0.464 ms for its two calls with the residual add, 0.231 -> 0.219 for the other, 2 threads
# (again, 10 rounds, load 4: 0.481 -> 0.436, 0.225 -> 0.204); 0.469 -> 0.453 at one thread. No other ResNet-18 kernel lies between 1 and 1.5. 1: weights-heavy
# wherever the weights outweigh the input, as before.
WEIGHTS_HEAVY = 1.5
# A weights-heavy kernel tiled across rows (a 7x7 or 14x14 map, output channels outermost) runs its
# panels of output channels in parallel, each panel's calls in turn, then that panel's row copy and
# epilogue (bias, residual add, ReLU) in the same parallel iteration, on sums still in L1/L2, where
# the panels give each core MIN_CALLS_PER_CORE of them. ResNet-18's layer3 3x3 256 @14 in the model
# (2 threads, 8 alternated rounds, load 5-6): 0.491 -> 0.439 ms (its two calls with the residual add)
# and 0.224 -> 0.213 ms (again, 10 rounds, load 4: 0.432 -> 0.375, 0.201 -> 0.183); at one thread
# level; layer4's 3x3 512 @7 level (0.650 / 0.654 ms, 0.318 / 0.319). False: every call in parallel, the epilogue after all of
# them (in one thread: the plain rule left it serial).
FLAT_EPILOGUE_PER_PANEL = True
# A weights-heavy kernel tiled across rows (its panels of output channels in parallel, each core reading
# all of the input) packs the whole input in each core's share of the panels, into a copy of its own,
# not once with its rows in parallel: a row packed by the other core was read from that core's cache
# (layer3 scaled 1.46x to 2 threads). Looped alone, 2 threads (11 alternated rounds, load 0.5-0.9):
# ResNet-18's 3x3 256 @14 0.108 -> 0.086 ms, 3x3 512 @7 0.129 -> 0.121 and 0.125 -> 0.120; one thread
# level (0.995, 1.007; 1.046 for 256 @14: the input packed twice). In the model (fresh processes,
# alternated, idle rounds only, load 1.1-1.4), 2 threads: layer3's 3x3s 0.247 -> 0.224 and 0.118 ->
# 0.106 ms, layer4's 0.368 -> 0.358 and 0.173 -> 0.168; whole-model wall ratio (median of rounds)
# 0.991, 0.994, 0.987, 0.996 in four runs of 12-20 rounds, kernels 2.722 -> 2.658 ms; one thread level
# (1.011 and 0.990, the bundle run second slower in both). Not layer3.0's strided 3x3 (not across rows): looped 0.084 -> 0.067 ms
# at 2 threads but 0.109 -> 0.120 at one, and in the model 0.094 -> 0.101 (its fp32 input, written by
# both cores, read whole by each). Measured on 2 cores only: with more, every core packs the whole input
# (and a 2-core build run on one thread packs it twice). False: packed once, its rows in parallel, as before.
PACK_PER_CORE = True
# A weights-heavy 1x1 kernel over whole output rows with more rows than a call takes (MobileNetV2's split
# expansions 64 -> 384 and 96 -> 576 @14: 7 pairs of rows) runs its rows outermost, each core a band of
# rows (all the panels), and packs its band's input rows in the band (one parallel loop, not two), where
# the calls split evenly between the cores. Why those kernels did not scale to 2 threads: panels outermost
# split the output by channels between the cores, while the packing before them (rows in parallel) and the
# depthwise conv after them (rows in parallel) split it by rows, so each core read half of the packed input
# and half of its next kernel's input from the other core's cache. Alone, looped (MobileNetV2's kernels,
# 11 alternated rounds, idle rounds only, load 0.4-0.5): 2 threads 96 -> 576 0.0404 -> 0.0235 ms, 64 -> 384
# 0.0299 -> 0.0143; 1 thread (CPU time) 0.0487 -> 0.0430, 0.0268 -> 0.0271. In the model (bundles
# alternated in one process, 2 threads, 16 idle rounds, load 0.9): 0.215 -> 0.149 and 0.199 -> 0.141 ms
# for their 3 and 4 calls, the depthwise convs after them 0.077 -> 0.060 and 0.053 -> 0.043, wall 0.923x.
# Only the rows outermost, packed once: 0.940x. Each core packing all of the input in its share of the
# panels instead (PACK_PER_CORE's way): alone 0.74x and 0.57x, in the model wall 0.992x. Where a call takes
# all the rows (7-row maps: one band) at stride 1, each core packs the whole input in its share of the
# panels: in the model (2 threads, 20 and 24 idle rounds, load 0.6) 160 -> 960 @7 0.104 -> 0.077 and
# 0.098 -> 0.074 ms, 320 -> 1280 0.062 -> 0.058 and 0.061 -> 0.055, wall 0.993x and 0.974x; one thread (14
# rounds) level, 1.008x (each of the 2 shares packs it). Not strided: ResNet-18's layer4.0 1x1 downsample
# alone 1.19x slower at one thread. Against False (the whole model, wall medians, 20-24 idle rounds, load
# 0.6-1.3), 2 threads: the bands alone 0.926x and 0.911x, with the 7-row maps 0.931x (2.50 -> 2.29 ms,
# OpenVINO 1.77 in the same rounds); one thread 0.989x (bands) and 0.969x (both). Measured on 2 cores
# only. False: panels outermost, packed once.
ROW_BANDS_1X1 = True
# A call over all of an odd number of rows (ODD_ROWS_A_CALL) whose 32-channel panels do not divide among
# the cores takes panels of 16 channels (a 2 x 1 grid each step of two rows), as many calls as cores can
# share evenly: MobileNetV2's 960 -> 160 and 576 -> 160 @7 (5 panels: 3 on one core, 2 on the other; 10
# calls, 5 a core). In the model (2 threads, bundles alternated in one process, 24 idle rounds, load 1.2):
# the two kernels' 3 calls 0.067 -> 0.061 ms (per-round ratio 0.905, quartiles 0.869-0.920; again, load
# 0.8: 0.925, 0.911-0.964), wall level (0.993-0.997: 6 us of 2.26 ms); 1 thread level (1.010, 16 rounds).
# Alone, one thread (CPU time, 12 rounds, load 1.6):
# 0.0173 -> 0.0168 and 0.0089 -> 0.0087 ms; 3 x 1 grids instead (three rows a step): 0.0160 and 0.0092
# ms, in the model 0.963x. Measured on 2 cores only. False: 32-channel panels there, as before.
EVEN_PANELS_ODD_ROWS = True
# A weights-heavy 1x1 kernel over a map of one (padded) row (conv_rows: tf2onnx's MobileNetV2 at 160x160,
# 96 -> 576 and 64 -> 384 over a row of 100 pixels, padded to 112) runs its pixels outermost, a band of
# them a core (all the panels), and packs its band's pixels in its share (one parallel loop), where the
# calls along the row split evenly among the cores; it ran panels outermost after a packing that was a
# parallel loop of extent 1 (one core packed all of the input, the other read its half from that core's
# cache), 2 threads no faster than one. Alone, looped (11 alternated rounds, idle rounds only, load 0.6),
# 2 threads: 96 -> 576 0.0255 -> 0.0144 ms, 64 -> 384 0.0166 -> 0.0089 (pixels outermost but packed
# once: 0.0179 and 0.0110); 1 thread (CPU time) 0.0238 -> 0.0233, 0.0139 -> 0.0140. With
# PACK_ONE_ROW_BY_PIXELS, against neither (bundles alternated in one process, idle rounds only, load 0.6-0.8),
# 2 threads: tf_mobilenet_v2 wall 0.908x and 0.909x (2.18 -> 2.01 ms; 24 rounds each, order swapped), its AMX
# convs 0.792x (0.725 -> 0.573 ms; 96 -> 576 x3 0.128 -> 0.087, 64 -> 384 x4 0.104 -> 0.074, 192 -> 32 x1
# 0.063 -> 0.033), the depthwise convs after them faster too; tf_resnet50_v2 wall 0.930x (16 rounds), its
# AMX convs 0.907x; 1 thread (12-20 rounds) tf_mobilenet_v2 wall 1.022x and 0.987x, tf_resnet50_v2 1.013x
# and 0.975x (level). The zoo's resnet18 and mobilenet_v2 have no such kernel (their schedules unchanged).
# Measured on 2 cores only. False: panels outermost, packed once.
BANDS_ONE_ROW_1X1 = True
# Every band streams all the weights: measured at 2 cores only, so at most this many (more: panels outermost).
BANDS_ONE_ROW_MAX_CORES = 2
# A packing done once (before the calls) over a map of one (padded) row runs its pixels in parallel, not
# its rows (one: a parallel loop of extent 1, one core packing all of the input). tf2onnx's MobileNetV2 at
# 160x160, 192 -> 32 over 400 pixels with the residual add (25 calls: no even bands), alone, looped, 2
# threads (idle rounds only, load 0.5): 0.0224 -> 0.0104 ms (15 rounds; again 0.0240 -> 0.0100 and 0.0209
# -> 0.0136, 11 each); packing per chunk of 5 calls instead 0.0105; 1 thread (CPU time, 11 rounds) 0.0136
# -> 0.0141. tf_resnet50_v2's input-heavy 1x1s over one row (grouped calls), alone, 2 threads (11 idle
# rounds, load 0.5-0.6): 0.0526 -> 0.0497, 0.0951 -> 0.0834, 0.0442 -> 0.0277, 0.0286 -> 0.0206 ms; 1
# thread (21 rounds) 0.992x and 0.994x (the base against itself 0.972x, 1.003x). False: rows in parallel
# there too (one loop of extent 1), as before.
PACK_ONE_ROW_BY_PIXELS = True
# With ROW_BANDS_1X1, a stride-1 1x1 whose rows split evenly into one band a core of 3 to ODD_ROWS_A_CALL
# rows takes the whole band a call, not two rows (pairs of rows, then the last alone: a 14-row map's two
# bands of 7 at 2 cores): each panel's weights then feed all of the band's rows from L1, where two rows a
# call walked all the weights through L2 once a pair. MobileNetV2's split expansions 96 -> 576 and 64 ->
# 384 @14, alone (11-12 alternated rounds, load 0.5): 2 threads 0.0234 -> 0.0215 and 0.0158 -> 0.0152 ms,
# 1 thread (CPU time) 0.0498 -> 0.0434 and 0.0273 -> 0.0252. In the model (bundles alternated in one
# process, idle rounds, load 0.55-0.67), 2 threads: their 7 calls 0.275 -> 0.230 and 0.281 -> 0.241 ms
# (per-round ratios 0.843 and 0.868), the wall 0.983x and 0.968x (24 and 30 rounds, order swapped); 1
# thread (16 rounds) 0.961x for the kernels (0.384 -> 0.360 ms), the wall level (0.995). Both rules
# against neither (30 idle rounds, load 0.9): 2 threads wall 0.978x (quartiles 0.958-0.991; OpenVINO's
# default 0.756x the old), the four kernels 0.872x (0.360 -> 0.317 ms); 1 thread (20 rounds) wall 0.987x
# (0.973-1.016). Measured on 2 cores only. False: two rows a call there, as before.
BAND_A_CALL_1X1 = True
# A call's fp32 sums in a buffer of that call, which its epilogue reads right after: a unit loop above
# the call in the parallel iteration, where the sums' init is decomposed (bf16.py's products do so).
# The init decomposed at the parallel loop itself went before it, so the sums buffer spanned the whole
# output (ResNet-18's stem 3.2 MB, layer1's 0.8 MB), each call storing its tiles to memory no call had
# touched. Calls grouped a chunk (PACK_PER_CALL, ROW_BANDS_1X1) keep one a call too (SUMS_PER_CALL_IN_CHUNK),
# a per-panel epilogue one a panel; a flat kernel without one keeps the whole output's (its row copy runs
# after every call). ResNet-18 bf16, 2 threads (bundles
# alternated in one process, 14 idle rounds each way, load 1.8-2.1): wall 0.948x and 0.938x (order
# swapped), the stem 0.309 -> 0.263 and 0.297 -> 0.256 ms, the stride-2 3x3s 0.083 -> 0.071, 0.097 ->
# 0.083 ms, kernel sums 2.63 -> 2.50 ms; the stem alone looped, 1 thread, 0.53-0.56 -> 0.45-0.47 ms (CPU
# time). MobileNetV2 (its 1x1s' sums 50-100 KB): wall level (1.017x and 0.991x, 16 rounds each). False: the
# init before the parallel loop, as before.
SUMS_PER_CALL = True
# With SUMS_PER_CALL, calls grouped a chunk (PACK_PER_CALL, ROW_BANDS_1X1; not a per-panel epilogue) keep
# one buffer a call too (a unit loop in the chunk), not one a chunk: a band of 7 rows x 384 channels kept
# 150 KB of sums a core, each call's tiles stored to lines no call had touched since the last run (a
# read for ownership each) with a pixel stride of all the channels; one call's 12.5 KB stay in L1 and
# its epilogue reads them at a 128-byte stride (the epilogue's code was already whole zmm loads, adds,
# max/min and stores). MobileNetV2 bf16, 2 threads (bundles alternated in one process, idle rounds only,
# load 1.3-1.5): the AMX convs 0.919x, 0.922x and 0.943x (order swapped; 20-24 rounds), 64 -> 384 @14
# x4 0.130 -> 0.105 ms, 96 -> 576 @14 x3 0.138 -> 0.119, 160 -> 960 @7 x3 0.091 -> 0.084, wall 0.966x
# and 0.981x; 1 thread (16 rounds, load 1.0) AMX convs 0.943x, wall 0.987x. ResNet-18 level (2 threads,
# AMX convs 0.997x, wall 1.018x, quartiles 0.988-1.061: its chunked kernels are few). Outputs
# bit-identical. What is left of the fp32 epilogue is its output's stores (writing bf16 bits instead, the
# 64 -> 384 @14 took 0.079 ms at 2 threads, H5). False: one buffer a chunk, as before.
SUMS_PER_CALL_IN_CHUNK = True
# Grouped calls whose epilogue reads a map of the output's size (a residual add) take up to this many bytes
# of sums a call, not MAX_CALL_SUMS (amx_calls): more pixels a call, so that each epilogue reads a longer run
# of the residual. Why the fused add cost nearly what its own kernel had: the residual comes from L3 (1.6 MB
# at ~18 GB/s, one thread), read in bursts of one call's 8 KB between AMX calls; the epilogue's code was
# already whole-zmm loads, adds and stores in the sums' order, in the calls' one parallel region.
# Prefetching the residual a call ahead (prefetcht0/t1, in or before the epilogue), copying it before the
# call, 16 KB calls or the epilogue channels-outer were all 3-47% slower (the 128 -> 512 1x1 over a row of
# 400, alone). tf_resnet50_v2's 64 -> 256 1x1 + residual at 40x40 (five 8-pixel tiles a row) now takes a
# whole row a call (40 KB of sums, not 8 KB); no other kernel of it, resnet18 or mobilenet_v2 changes. In
# the model (bundles alternated in one process, idle rounds only, outputs identical), 2 threads: its two
# kernels 0.369 -> 0.299 and 0.357 -> 0.296 ms (per-round ratios 0.824 and 0.856; 20 rounds each, order
# swapped, load 1.2-1.7), wall 0.992x and 0.993x; 1 thread (10 rounds) 0.687 -> 0.629 ms (0.922), wall 0.978x.
# Alone, looped, 1 thread: 0.343 -> 0.291 ms. Without the add (a bias alone) 40 KB calls were level or
# slower: not applied there. None: every call MAX_CALL_SUMS, as before.
# (40 KB, not more: a whole 40-pixel row of 256 channels; 64 KB gave ResNet-50 v1's 14x14 residual kernels 56 KB
# calls, past Sapphire Rapids' 48 KB L1 and never measured: R4)
RESIDUAL_CALL_SUMS = 40 * 1024
PACK_ONCE_BYTES = 2 * 1024 * 1024
PACK_CHUNK_BYTES = 64 * 1024
PACK_LANES = 16  # the packing's vector: 16 fp32 rounded to 16 bf16
# A packing whose channels fill no vector (ResNet's stem: 3 channels and a zero one, read from the NCHW
# image) packs its input's box of rows and columns apart from the padding: one pixel at a time with a
# branch for the padding before, the box now branch-free, which LLVM vectorizes (8 pixels a step: each
# channel's plane loaded, rounded, the channels interleaved: vpmovdw, vpermt2w, one 64-byte store).
# ResNet-18's stem alone, looped (one thread, CPU time, alternated rounds, load 1.1-1.8): 0.395 -> 0.349
# and 0.365 -> 0.321 ms, bit-identical output. In the model (2 threads, bundles alternated in one
# process, 16 idle rounds each way, load 1.8-2.1): the stem 0.210 -> 0.190 and 0.210 -> 0.191 ms
# (per-round ratios 0.926 and 0.896), the wall level (0.993x and 1.012x, the bundle run second faster
# in both). A 3-channel 3x3 stride-2 stem in bf16 alike (R6, alone, 1 thread: 0.171 -> 0.134 ms; ResNet's
# 0.350 -> 0.284). False: the packing one pixel at a time with a branch, as before.
PACK_INSIDE_APART = True


def amx_conv_call(sch: s_tir.Schedule, block, cpu: CpuSpec, *, weights_heavy: bool) -> AmxBf16Conv:
    """The AMX call that computes ``block`` (a ``conv2d_nhwc_bf16`` kernel: loops n, h, w, o, rh,
    rw, c, or n, p, o, rh, rw, c tiled across rows) on ``cpu``; ``weights_heavy``: what
    :func:`weights_outweigh_input` says of it. Raises :class:`NotApplicable` where the CPU has no
    AMX-BF16 or the kernel does not fit its tiles."""
    if cpu.bf16_dot != "amx":
        raise NotApplicable("this CPU has no AMX-BF16 tiles (the direct NHWC convolution needs them)")
    loops = sch.get_loops(block)
    if len(loops) not in (6, 7):
        raise NotApplicable("not a conv2d_nhwc_bf16 block (loops n, h, w, o, rh, rw, c; or n, p, o, rh, rw, c)")
    extents = [int(sch.get(loop).extent) for loop in loops]
    rows, cols, kh, kw, k = extents[-5:]
    flat = int((sch.get(block).annotations or {}).get(FLAT_ATTR, 0))
    if len(loops) == 6:  # tiled across output rows: pixels padded to tiles of 16 (two where they allow)
        if not flat or rows % 16 or k % K_CHANNELS:
            raise NotApplicable("a flat conv2d_nhwc_bf16 wants its pixels in 16s and channels in 32s")
        mt = 2 if rows % 32 == 0 else 1
        nt = 2 if cols % (2 * PANEL) == 0 and mt * 2 + mt + 2 <= TILE_REGISTERS else 1
        dot = AmxBf16Conv(16, mt, nt, k, 1, kh, kw, flat=flat, update=True)
        return _grouped(sch, block, dot, rows, cols, extents[:-5], cpu, weights_heavy)
    if cols % PANEL:
        raise NotApplicable("output channels not padded to the 16-channel panel")
    row_taps = k % K_CHANNELS != 0
    if row_taps and not row_taps_fit(k, kw):
        raise NotApplicable(f"{k} input channels: AMX tiles want multiples of {K_CHANNELS}, or a kernel row "
                            "of at most 32 values")
    grid = next(((m, mt) for m, mt in GRIDS if rows % (m * mt) == 0), None)
    if grid is None:
        raise NotApplicable(f"{rows} output pixels a row split into no tiles of 7-16 rows")
    m, mt = grid
    nt = 2 if cols % (2 * PANEL) == 0 and mt * 2 + mt + 2 <= TILE_REGISTERS else 1
    if TALL_GRID and not row_taps and not weights_heavy and rows % (m * TALL_GRID) == 0:
        mt, nt = TALL_GRID, 1
    stride = int((sch.get(block).annotations or {}).get(ROW_STRIDE_ATTR, 1))
    dot = AmxBf16Conv(m, mt, nt, k, stride, kh, kw, row_taps, update=True)
    if ROWS_A_CALL and not row_taps and (kh * kw > 1 or ROWS_A_CALL_1X1) and weights_heavy:
        dot = _over_rows(dot, rows, cols, extents[-6], cpu.cores, prod(extents[:-6]))
    return _grouped(sch, block, dot, rows, cols, extents[:-5], cpu, weights_heavy)


def weights_outweigh_input(sch: s_tir.Schedule, block) -> bool:
    """Whether the block's packed weights outweigh its packed input by :data:`WEIGHTS_HEAVY`
    (ResNet's last stages): such a kernel runs its output channels outermost (each core streams its
    share of the weights once), takes whole output rows a call (:data:`ROWS_A_CALL`) and no
    grouped calls."""
    return _bytes(sch, block, weights=True) > WEIGHTS_HEAVY * _bytes(sch, block, weights=False)


def _over_rows(dot: AmxBf16Conv, width: int, cols: int, height: int, cores: int, images: int) -> AmxBf16Conv:
    """``dot`` over two whole output rows a call as a 2 x 2 grid where a row fills one tile
    (:data:`ROWS_A_CALL`: a weights-heavy kernel, its calls not grouped), a 1x1's over all of a
    core's band of rows (:data:`BAND_A_CALL_1X1`: one image, more than one core), over all of an odd
    number of rows (pairs, then the last row alone: :data:`ODD_ROWS_A_CALL`; a 1x1 of one image 2 x 1
    where 32-channel panels would split unevenly among the ``cores``: :data:`EVEN_PANELS_ODD_ROWS`);
    else ``dot``. ``images``: the batch (the loops outside the rows)."""
    if dot.mt != 1 or width != dot.m or cols % (2 * PANEL):
        return dot
    one_1x1 = dot.kh * dot.kw == 1 and images == 1
    band = height // cores if cores > 1 and height % cores == 0 else 0
    if BAND_A_CALL_1X1 and ROW_BANDS_1X1 and one_1x1 and dot.stride == 1 and 3 <= band <= ODD_ROWS_A_CALL:
        return replace(dot, mt=2, nt=2, out_rows=band)
    if height % 2 == 0:
        return replace(dot, mt=2, nt=2, out_rows=2)
    if ODD_ROWS_A_CALL and 3 <= height <= ODD_ROWS_A_CALL:
        uneven = one_1x1 and (cols // (2 * PANEL)) % cores != 0 and (cols // PANEL) % cores == 0
        return replace(dot, mt=2, nt=1 if EVEN_PANELS_ODD_ROWS and uneven else 2, out_rows=height)
    return dot


def _grouped(sch: s_tir.Schedule, block, dot: AmxBf16Conv, rows: int, cols: int, outer: list[int],
             cpu: CpuSpec, weights_heavy: bool) -> AmxBf16Conv:
    """``dot`` with as many grids a call as keep :data:`MIN_CALLS_PER_CORE` calls a core and
    :data:`MAX_CALL_SUMS` bytes of sums a call (:data:`RESIDUAL_CALL_SUMS` where the epilogue adds a
    residual map): first more channels (all of a pixel's), then more pixels of the row
    (:data:`GROUPED_CALLS`). Not where the weights outweigh the input (they
    stream from memory once, each B tile used by the calls of every row in turn: 3x3 512 @7 and
    128 @28 were 2-4% slower grouped, 3x3 64 @56 4% faster)."""
    if not GROUPED_CALLS or dot.out_rows > 1 or weights_heavy:
        return dot
    tiles = prod(outer) * (rows // dot.rows) * (cols // dot.cols)
    # (a flat kernel's epilogue runs after all its calls, not per call: not there)
    cap = RESIDUAL_CALL_SUMS if RESIDUAL_CALL_SUMS and not dot.flat and epilogue_reads_a_map(sch, block) else None
    gc = most_dividing(cols // dot.cols, lambda g: call_fits(tiles, dot.rows * dot.cols, cpu.cores, g, cap))
    gr = most_dividing(rows // dot.rows, lambda g: call_fits(tiles, dot.rows * dot.cols, cpu.cores, g * gc, cap))
    return replace(dot, row_groups=gr, col_groups=gc)


def tile_amx_conv(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Tile ``block`` into AMX calls and its epilogue per tile (module docstring), schedule its
    packing block; raises :class:`NotApplicable` where :func:`amx_conv_call` does."""
    weights_heavy = weights_outweigh_input(sch, block)
    dot = amx_conv_call(sch, block, cpu, weights_heavy=weights_heavy)
    loops = sch.get_loops(block)
    name = sch.get(block).name_hint
    outer, row, col, reduce = loops[:-5], loops[-5], loops[-4], loops[-3:]
    col_o, col_i = sch.split(col, [None, dot.cols])
    col_calls = int(sch.get(col_o).extent)
    if dot.out_rows > 1:  # whole output rows a call: the rows split, not the pixels
        row_o, row_i = sch.split(outer[-1], [None, dot.out_rows])
        outer, inner = outer[:-1], [row_i, row]
    else:
        row_o, row_i = sch.split(row, [None, dot.rows])
        inner = [row_i]
    row_calls = int(sch.get(row_o).extent)
    images = prod(int(sch.get(loop).extent) for loop in outer)
    one_row = dot.out_rows == 1 and not dot.flat and int(sch.get(outer[-1]).extent) == 1
    band = None  # a one-row map's band of pixels a core (BANDS_ONE_ROW_1X1)
    if one_row and _pixel_bands(dot, weights_heavy, images, row_calls, cpu):
        band, row_o = sch.split(row_o, [cpu.cores, None])
    bands = band is not None or _row_bands(dot, weights_heavy, images, row_calls, col_calls, cpu)
    across = [*outer, row_o] if band is None else [*outer, band, row_o]  # (the band outside its calls)
    order = [col_o, *outer, row_o] if weights_heavy and not bands else [*across, col_o]
    sch.reorder(*order, *inner, col_i, *reduce)
    # a flat kernel's tiles are no box of output pixels (its row copy and epilogue run after it), but
    # a panel's calls cover all of its pixels (FLAT_EPILOGUE_PER_PANEL; one image)
    one_image = all(int(sch.get(loop).extent) == 1 for loop in outer)
    per_panel = (_panel_epilogue(sch, block, col_calls * dot.cols) if dot.flat and weights_heavy and one_image
                 and col_calls >= MIN_CALLS_PER_CORE * cpu.cores else None)
    epilogue = None if dot.flat else epilogue_per_tile(sch, block, order[-1])
    # a band's pixels packed in the band before the blockize (after it TVM takes the root scope of a
    # one-row kernel for no stage pipeline, and compute_at refuses), the band's loop the parallel one
    packing = None if band is None else schedule_input(sch, band, band=True)
    tile = sch.blockize(row_i)
    if band is not None:
        packs, calls = sch.fuse(*order[:-2]), sch.fuse(*order[-2:])
        chunk, unit = int(sch.get(calls).extent), None
        if SUMS_PER_CALL and SUMS_PER_CALL_IN_CHUNK:
            calls, unit = sch.split(calls, [None, 1])
    else:
        if per_panel is None:
            calls = sch.fuse(*order)
        else:  # the panels in parallel, a panel's calls in turn, then its row copy and epilogue
            calls, epilogue = _merge_per_panel(sch, sch.fuse(*order[:-1]), per_panel, dot.cols), per_panel
        per_core = bands or (PACK_PER_CORE and per_panel is not None)
        chunk = _pack_chunk(sch, block, dot, col_calls, int(sch.get(calls).extent), cpu, per_core)
        packs, unit = calls, None
        if chunk > 1:
            packs, calls = sch.split(calls, [None, chunk])
            if per_panel is None and SUMS_PER_CALL and SUMS_PER_CALL_IN_CHUNK:
                calls, unit = sch.split(calls, [None, 1])
        elif per_panel is None and SUMS_PER_CALL:  # a unit loop a split makes (a step the Schedule page shows)
            packs, unit = sch.split(calls, [None, 1])
    sch.parallel(packs)
    # the tile's init a block of its own, tensorized into no code: the call starts from tilezero
    # (per panel: the init inside the panel's iteration, so that its epilogue can follow there; else
    # under a unit loop around each call, in the parallel iteration or in a chunk's loop over its calls:
    # a call's sums a buffer of that call, SUMS_PER_CALL and SUMS_PER_CALL_IN_CHUNK)
    if per_panel is not None:
        init_at = sch.get_loops(tile)[-1]
    else:
        init_at = unit if unit is not None else calls
    zero_init(sch, tile, init_at, dot.rows, dot.cols, dot.out_rows)
    sch.tensorize(tile, register(dot))
    sch.annotate(sch.get_loops(tile)[0], IMPORT_LLVM, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    walk = (f"{dot.kh} kernel rows of {dot.kw}x{dot.k} values a tile row" if dot.row_taps
            else f"{dot.kh}x{dot.kw} taps x K={dot.k}" + (f", pixels across rows {dot.flat} wide" if dot.flat else ""))
    steps = [f"{name}: {dot.name} (AMX tdpbf16ps, direct NHWC, no im2col: {dot.mt} x {dot.nt} tiles of {dot.m} "
             f"rows x {PANEL} channels over {walk}, stride {dot.stride}, fp32 in tiles"
             f"{_grids(dot)}{f', {dot.out_rows} output rows a call' if dot.out_rows > 1 else ''}), parallel outside"
             f"{', pixels outermost (a band of the row a core)' if band is not None else ''}"
             f"{', rows outermost (a band of rows a core)' if bands and band is None and row_calls > 1 else ''}"
             f"{'' if epilogue is None else ', epilogue per tile' if per_panel is None else ', epilogue per panel'}"]
    return "; ".join(steps + (packing if packing is not None else schedule_input(sch, packs if chunk else None)))


def _row_bands(dot: AmxBf16Conv, weights_heavy: bool, images: int, row_calls: int, col_calls: int,
               cpu: CpuSpec) -> bool:
    """Whether a weights-heavy 1x1 kernel over whole output rows runs in bands of rows, one a core, each
    packing the rows it reads (:data:`ROW_BANDS_1X1`; one band, a call over all the rows, at stride 1 only):
    ``images`` x ``row_calls`` down the map x ``col_calls`` panels. Only where every core's share packs
    the same number of rows (a share whose rows vary would give the packing a loop whose extent varies by
    share, which MetaSchedule's DisallowDynamicLoop refuses: the default could not seed a search), whole
    images a core where there are several, and on more than 2 cores whole rows of calls a share (shares
    of the same span but other offsets still gave 16x16 / 480 channels on 6 cores a varying extent; and
    shorter shares would have every core pack the same rows again)."""
    calls = images * row_calls * col_calls
    if not (ROW_BANDS_1X1 and weights_heavy and dot.out_rows > 1 and dot.kh * dot.kw == 1
            and (row_calls > 1 or dot.stride == 1) and cpu.cores > 1 and calls % cpu.cores == 0):
        return False
    share = calls // cpu.cores
    if images > 1:
        return share % (row_calls * col_calls) == 0
    rows = {(c * share + share - 1) // col_calls - (c * share) // col_calls for c in range(cpu.cores)}
    return len(rows) == 1 and (cpu.cores <= 2 or share % col_calls == 0)


def _pixel_bands(dot: AmxBf16Conv, weights_heavy: bool, images: int, row_calls: int, cpu: CpuSpec) -> bool:
    """Whether a 1x1 kernel over a map of one (padded) row runs in bands of its pixels, one a core,
    each packing its band's pixels in its share of the calls (:data:`BANDS_ONE_ROW_1X1`): one image at
    stride 1, its ``row_calls`` along the row splitting evenly among the cores."""
    return (BANDS_ONE_ROW_1X1 and weights_heavy and images == 1 and dot.kh * dot.kw == 1 and dot.stride == 1
            and 1 < cpu.cores <= BANDS_ONE_ROW_MAX_CORES and row_calls % cpu.cores == 0)


def _panel_epilogue(sch: s_tir.Schedule, block, channels: int):
    """A flat kernel's epilogue that can run per panel of output channels (its one spatial consumer,
    the row copy inlined in it, over all ``channels``: :data:`FLAT_EPILOGUE_PER_PANEL`); None: none."""
    if not FLAT_EPILOGUE_PER_PANEL:
        return None
    consumers = sch.get_consumers(block)
    if len(consumers) != 1 or not block_facts(sch, consumers[0]).is_spatial:
        return None
    last = sch.get_loops(consumers[0])[-1]
    return consumers[0] if int(sch.get(last).extent) == channels else None


def _merge_per_panel(sch: s_tir.Schedule, panels, epilogue, cols: int):
    """``epilogue``'s channels split into panels of ``cols`` and its panel loop merged into the loop
    over ``panels`` (reverse_compute_at cannot follow a flat kernel's pixels ``y * W' + x`` back to
    the calls); the merged loop."""
    loops = sch.get_loops(epilogue)
    panel, channel = sch.split(loops[-1], [None, cols])
    sch.reorder(panel, *loops[:-1], channel)
    return sch.merge(panels, panel)


def _pack_chunk(sch: s_tir.Schedule, block, dot: AmxBf16Conv, col_calls: int, calls: int, cpu: CpuSpec,
                per_core: bool = False) -> int:
    """Calls a chunk whose input rows are packed in the chunk (:data:`PACK_PER_CALL`; ``per_core``, a
    weights-heavy kernel's panels with their epilogues or its bands of rows: a core's share, all of its
    input or its band's rows, :data:`PACK_PER_CORE`, :data:`ROW_BANDS_1X1`); 0: packed once."""
    if per_core and cpu.cores > 1 and calls % cpu.cores == 0:
        return calls // cpu.cores
    if not PACK_PER_CALL or dot.kh * dot.kw > 1 or dot.flat or dot.out_rows > 1 or col_calls > 1:
        return 0
    packed = _bytes(sch, block, weights=False)
    if dot.stride == 1 and 3 * packed <= PACK_ONCE_BYTES:
        return 0
    per_call = packed // (calls * dot.stride)
    fits = [d for d in range(1, calls + 1) if calls % d == 0 and calls // d >= 2 * cpu.cores]
    if not fits:
        return 0
    return next((d for d in fits if d * per_call >= PACK_CHUNK_BYTES), fits[-1])


def _grids(dot: AmxBf16Conv) -> str:
    groups = dot.row_groups * dot.col_groups
    return f"; {dot.row_groups} x {dot.col_groups} grids a call, one ldtilecfg" if groups > 1 else ""


def schedule_input(sch: s_tir.Schedule, call=None, band: bool = False) -> list[str]:
    """The packing block's rows in parallel, its channels vectorized where they fill vectors, or, where
    they do not (the stem's 3 + 1 channels), its box of input rows and columns packed apart from the
    padding (:data:`PACK_INSIDE_APART`); with ``call`` (the parallel loop of chunks of calls), the rows
    a chunk reads packed in that chunk instead (``band``: the chunk is a core's band of a one-row map's pixels)."""
    block = next((b for b in root_blocks(sch) if sch.get(b).name_hint == INPUT_NAME), None)
    if block is None:
        return []
    if call is not None:
        try:
            sch.compute_at(block, call)
        except s_tir.ScheduleError:  # (a packing TVM will not split by calls: packed once)
            call = None
    # its input's bits, rounded by their producer (explorer.passes.bf16_conv_bits): only padded here
    bits = all(str(r.source.dtype) == "uint16" for r in sch.get(block).reads)
    done = "padded" if bits else "rounded to bf16 and padded"
    loops = sch.get_loops(block)  # n, h, w, c (n, pixel, c: flattened)
    c = loops[-1]
    lanes = int(sch.get(c).extent) % PACK_LANES == 0
    if call is None and not lanes and _pack_inside_apart(sch, block):
        return [f"{INPUT_NAME}: {done} once, the input's rows and columns apart from the "
                "padding (the box's rows in parallel, no branch: vectorized by LLVM)"]
    one_row = (PACK_ONE_ROW_BY_PIXELS and call is None and len(loops) == 4
               and int(sch.get(loops[1]).extent) == 1)
    if call is None:
        sch.parallel(sch.fuse(*loops[:3 if one_row else 2]))  # (one row: its pixels in parallel)
    if lanes:
        # 16 lanes a vector: vectorized whole, padded channels (144 -> 160) made TVM keep the loop
        # scalar (a select per lane) and LLVM vectorize it 8 lanes wide (the 144 -> 24 @56 kernel,
        # one thread, load 4: 0.085-0.086 -> 0.075-0.077 ms; unpadded ones level to 4% faster)
        sch.vectorize(sch.split(c, [None, PACK_LANES])[1])
    if call is not None and band:
        return [f"{INPUT_NAME}: the pixels of a core's band {done} in that band"]
    if call is not None:
        return [f"{INPUT_NAME}: the rows a chunk of calls reads {done} in that chunk"]
    what = "pixels of its one row" if one_row else "rows"
    return [f"{INPUT_NAME}: {what} in parallel, {done} once"]


def _pack_inside_apart(sch: s_tir.Schedule, block) -> bool:
    """The packing's rows, then the columns of its input rows, split into the padding before, the
    input's box and the padding after (``loop_partition``: a block each), the box's rows in parallel and
    its channels unrolled: with no branch left, LLVM vectorizes the box's pixels, loading each channel's
    plane (an NCHW image: the stem's transpose is in its packing; an NHWC input's pixels alike) and
    interleaving the channels
    (:data:`PACK_INSIDE_APART`). False (nothing done) where the block says no box
    (:data:`explorer.passes.bf16_conv_nhwc.INSIDE_ATTR`: a flattened packing), has no padding, or it is off."""
    inside = (sch.get(block).annotations or {}).get(INSIDE_ATTR)
    loops = sch.get_loops(block)
    if not PACK_INSIDE_APART or inside is None or len(loops) != 4:
        return False
    top, height, left, width = (int(v) for v in inside)
    row_parts = _parts(int(sch.get(loops[1]).extent), top, height)
    col_parts = _parts(int(sch.get(loops[2]).extent), left, width)
    if not row_parts[0] and not col_parts[0]:
        return False
    rows = sch.loop_partition(loops[1], row_parts[0])[row_parts[1]] if row_parts[0] else loops[1]
    cols = sch.get_loops(sch.get_child_blocks(rows)[0])[-2]
    box = sch.loop_partition(cols, col_parts[0])[col_parts[1]] if col_parts[0] else cols
    sch.unroll(sch.get_loops(sch.get_child_blocks(box)[0])[-1])
    sch.parallel(rows)
    return True


def _parts(extent: int, start: int, length: int) -> tuple[list[int], int]:
    """The ``loop_partition`` factors that split a loop of ``extent`` into ``[0, start)``,
    ``[start, start + length)`` and the rest, leaving out empty parts, and which part is the middle one;
    no factors where there is nothing to split off (or no input in the loop)."""
    end = min(start + length, extent)
    if start >= extent or (start == 0 and end == extent):
        return [], 0
    if end == extent:
        return [start], 1
    return ([start, end - start], 1) if start > 0 else ([end], 0)


def _bytes(sch: s_tir.Schedule, block, *, weights: bool) -> int:
    """Bytes of the block's weights (6-D) or of its input (4-D) buffer."""
    return sum(2 * prod(int(d) for d in r.source.shape) for r in sch.get(block).reads
               if str(r.source.dtype) == "uint16" and (len(r.source.shape) == 6) == weights)


__all__ = ["amx_conv_call", "schedule_input", "tile_amx_conv", "weights_outweigh_input"]
