"""The LLVM IR of the AMX tile calls (:mod:`explorer.schedule.amx_ir`): which tile registers a
grid of C tiles takes with its A and B tiles (text only: any host; the kernels that import it compile
in tests/test_bf16_direct_conv.py and tests/test_int8_amx.py)."""

from __future__ import annotations

import re

from explorer.schedule.amx_ir import TILE_REGISTERS, a_registers, conv_tiles_ir


def _loads(ir: str) -> list[int]:
    return [int(t) for t in re.findall(r"tileloadd64\(i8 (\d+), ptr %[ab]p", ir)]


def _config_rows(ir: str, fn: str) -> list[int]:
    """The rows of tiles tmm0-tmm15 in ``@fn_cfg`` (bytes 48-63 of the configuration)."""
    cfg = re.search(rf"@{fn}_cfg = internal constant \[64 x i8\] \[([^\]]*)\]", ir).group(1)
    return [int(v.split()[1]) for v in cfg.split(", ")][48:]


def test_a_two_by_two_grid_gives_each_a_tile_a_register_of_its_own():
    ir = conv_tiles_ir("f", "tdpbf16ps", 16, 2, 2, 64, zero_c=True)
    assert a_registers(2, 2) == 2 and _loads(ir) == [4, 5, 6, 7]  # A in tmm4-5, B in tmm6-7
    assert _config_rows(ir, "f")[:8] == [16] * 8 and ir.count("call void @llvm.x86.tdpbf16ps(") == 4


def test_a_four_by_one_grid_loads_its_a_tiles_into_two_registers_in_turn_and_one_b_tile_per_four_products():
    ir = conv_tiles_ir("g", "tdpbf16ps", 14, 4, 1, 64, zero_c=True)
    assert a_registers(4, 1) == 2 and 4 + a_registers(4, 1) + 1 <= TILE_REGISTERS
    assert _loads(ir) == [6, 4, 5, 4, 5]  # B (tmm6) first, then A tiles alternating tmm4 / tmm5
    products = re.findall(r"tdpbf16ps\(i8 (\d+), i8 (\d+), i8 (\d+)\)", ir)
    assert products == [("0", "4", "6"), ("1", "5", "6"), ("2", "4", "6"), ("3", "5", "6")]
    assert _config_rows(ir, "g") == [14] * 6 + [16] + [0] * 9  # 4 C, 2 A of 14 rows; B: 64 bytes = 16 rows


def test_seven_output_rows_of_one_tile_each_go_in_three_pairs_then_a_row_after_one_tile_config():
    ir = conv_tiles_ir("h", "tdpbf16ps", 7, 2, 2, 64, zero_c=True, out_rows=7)
    call = ir.split("define i32 @h(")[1]
    assert ir.count("call void @llvm.x86.ldtilecfg") == 1 and call.count("call i32 @h_rows(") == 1
    assert "icmp eq i64 %snext, 3" in call  # the pairs: rows 0-5
    assert call.count("call i32 @h_row(") == 1 and "mul i64 %ayr, 6" in call  # the 7th row, 6 rows on
    row = ir.split("define internal i32 @h_row(")[1].split("\n}")[0]
    # the last row's 1 x 2 grid in the registers the 2 x 2 grid's configuration gives it: C tmm0-1, A tmm4, B tmm6-7
    assert re.findall(r"tdpbf16ps\(i8 (\d+), i8 (\d+), i8 (\d+)\)", row) == [("0", "4", "6"), ("1", "4", "7")]
    assert _config_rows(ir, "h")[:8] == [7] * 6 + [16] * 2
