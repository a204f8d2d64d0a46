"""Products of few rows (a classifier's one row, a decoder's GEMV at batch 1) on vdpbf16ps: enough
independent accumulator chains per parallel task that the instruction's latency is hidden: more
weight panels a task where the channels allow, else K in interleaved partial sums added at the end
(explorer/schedule/defaults/bf16.py ``_panels``, ``_k_split``)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import te

from explorer.passes.bf16_dense import dense_bf16, pack_weights
from explorer.schedule.defaults import default_schedule
from explorer.schedule.trace import replay
from explorer.target import parse_target
from tests.bf16_products import check_dense_bf16, dense_bf16_func, run_dense_bf16
from tests.cpu_marks import NEEDS_BF16


def _build(spec: str, m: int, n: int, k: int, cores: int = 2):
    """The product built for ``spec`` as a CPU of ``cores`` cores (the rule's choice depends on them)."""
    target = parse_target(spec)
    func, choice = default_schedule(dense_bf16_func(m, n, k), dataclasses.replace(target.cpu_spec(), cores=cores))
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def _accumulators(lib) -> set[str]:
    """The registers the built library's vdpbf16ps write (AT&T syntax: the destination last)."""
    return set(re.findall(r"vdpbf16ps\s+[^\n]*,\s*(%zmm\d+)\n", lib.mod.inspect_source("asm")))


@pytest.mark.parametrize("spec", ["cpu:sapphirerapids", "cpu:cooperlake"])
def test_a_classifier_row_takes_nine_panels_a_task_and_keeps_nine_chains(spec):
    """MobileNetV2's classifier (1 x 1280 -> 1008 channels, 63 panels): 9 panels a task, 7 tasks for
    2 cores, 9 sums in registers (one panel a task was one chain of 640 dependent vdpbf16ps)."""
    lib, choice = _build(spec, 1, 1008, 1280)
    assert "1 rows x 9 panels" in choice.steps[0] and "partial sums" not in choice.steps[0], choice
    assert "parallel outside" in choice.steps[0]
    assert len(_accumulators(lib)) >= 9


def test_more_cores_keep_a_task_each_and_take_the_rest_of_the_chains_from_k():
    """8 cores: 9 panels a task would leave 7 tasks; 7 panels (9 tasks), K in 2 sums (14 chains)."""
    _, choice = _build("cpu:cooperlake", 1, 1008, 1280, cores=8)
    assert "1 rows x 7 panels" in choice.steps[0] and "K in 2 interleaved" in choice.steps[0], choice


@pytest.mark.parametrize("spec", ["cpu:sapphirerapids", "cpu:cooperlake"])
def test_one_panel_splits_k_into_eight_partial_sums(spec):
    """16 channels (one panel, no other to take): K in 8 interleaved partial sums, 8 chains."""
    lib, choice = _build(spec, 1, 16, 512)
    assert "1 rows x 1 panel" in choice.steps[0] and "K in 8 interleaved partial sums" in choice.steps[0], choice
    assert len(_accumulators(lib)) >= 8
    func = dense_bf16_func(1, 16, 512)  # the trace a record or an export keeps replays to the same kernel
    scheduled, choice = default_schedule(func, parse_target(spec).cpu_spec())
    assert tvm_ffi.structural_equal(replay(func, choice.trace).mod["main"], scheduled)


def test_two_rows_take_four_panels_and_eight_rows_keep_the_rule_of_two():
    _, two = _build("cpu:cooperlake", 2, 1024, 256)
    assert "2 rows x 4 panels" in two.steps[0] and "partial sums" not in two.steps[0], two
    _, eight = _build("cpu:cooperlake", 8, 1024, 256)
    assert "8 rows x 2 panels" in eight.steps[0], eight


def test_a_product_of_two_panels_on_two_cores_splits_k_under_the_parallel_loop():
    _, choice = _build("cpu:cooperlake", 1, 32, 4096)
    assert "1 rows x 1 panel" in choice.steps[0] and "K in 8 interleaved" in choice.steps[0], choice
    assert "parallel outside" in choice.steps[0]


def test_k_pairs_no_count_near_the_want_divides_take_the_largest_divisor_below_it():
    """1 x 1302 -> 208: 13 panels (a prime: one a task), 651 pairs = 3 x 7 x 31: no count from 8 to 16
    divides them, 7 partial sums do (the one chain it kept before ran 2.9x slower, R2's measurement)."""
    _, choice = _build("cpu:cooperlake", 1, 208, 1302)
    assert "1 rows x 1 panel" in choice.steps[0] and "K in 7 interleaved" in choice.steps[0], choice


# 9 panels; 9 panels a row of 3; K split alone (one core, then two); 2 rows x 5 panels; 3 panels and K in 5
# sums; 2 and 4 rows of one panel (K in 4 and 2 sums)
@NEEDS_BF16
@pytest.mark.parametrize("m, n, k", [(1, 1008, 1280), (3, 1008, 512), (1, 16, 512), (1, 32, 4096), (2, 80, 198),
                                     (1, 48, 100), (2, 16, 64), (4, 16, 64), (1, 208, 1302)])
def test_few_row_products_match_numpy_at_the_bf16_tolerance(m, n, k):
    lib, _ = _build("cpu", m, n, k)  # (no row count here is a multiple of 16: vdpbf16ps on AMX CPUs too)
    check_dense_bf16(*run_dense_bf16(lib, m, n, k))


@NEEDS_BF16
def test_a_decoders_one_token_product_with_k_in_partial_sums_matches_numpy():
    """Hidden states [1, M, K] (no reshape before the product): the unit loop stays outside."""
    x = te.placeholder((1, 2, 128), "float32", "x")
    w = te.placeholder((1, 64, 16, 2), "uint16", "w")
    func, choice = default_schedule(te.create_prim_func([x, w, dense_bf16(x, w)]), parse_target("cpu").cpu_spec())
    assert "K in 4 interleaved partial sums" in choice.steps[0], choice
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((2, 128)).astype("float32"), rng.standard_normal((128, 16)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 2, 16), "float32"))
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    lib["main"](tvm.runtime.tensor(xs[None]), tvm.runtime.tensor(pack_weights(ws)), out)
    check_dense_bf16(out.numpy()[0], xs, ws)
