"""The group nest every grouped AMX call shares (:mod:`explorer.schedule.amx_groups`): one tile
configuration, counted loops outermost first, the grid's call innermost, one release."""

from __future__ import annotations

from explorer.schedule.amx_groups import GroupLoop, groups_ir, offset
from explorer.schedule.bf16_dot import AmxBf16


def _nest() -> list[str]:
    loops = [GroupLoop("outer", "o", 3, (offset("op", "c", "o", 64),)), GroupLoop("inner", "n", 4, (offset("np", "op", "n", "%step"),))]
    return groups_ir("f", "ptr %c, i64 %step", ["  %x = add i64 1, 2"], loops, "  %res = call i32 @f_grid(ptr %np)").splitlines()


def test_loops_nest_outermost_first_with_the_call_innermost():
    ir = _nest()
    assert ir[0] == "define i32 @f(ptr %c, i64 %step) {" and "  call void @llvm.x86.ldtilecfg(ptr @f_cfg)" in ir
    at = {line: i for i, line in enumerate(ir)}
    assert at["outer:"] < at["  %op = getelementptr i8, ptr %c, i64 %op.o"] < at["inner:"] \
        < at["  %res = call i32 @f_grid(ptr %np)"] < at["outerend:"] < at["groupsend:"]
    # the inner loop runs back to itself, the outer one from its end block; each counts its own turns
    assert "  %n = phi i64 [0, %outer], [%nnext, %inner]" in ir and "  %o = phi i64 [0, %go], [%onext, %outerend]" in ir
    assert "  %ndone = icmp eq i64 %nnext, 4" in ir and "  br i1 %ndone, label %outerend, label %inner" in ir
    assert "  %odone = icmp eq i64 %onext, 3" in ir and "  br i1 %odone, label %groupsend, label %outer" in ir
    assert ir.count("  call void @llvm.x86.tilerelease()") == 1 and ir[-2:] == ["  ret i32 0", "}"]


def test_a_grouped_bf16_call_walks_k_blocks_then_columns_then_rows():
    ir = AmxBf16(768, 2, 2, zero=True, row_groups=4, col_groups=2, kblocks=2).llvm_ir
    assert ir.index("\nkblock:") < ir.index("\ncolgroup:") < ir.index("\nrowgroup:") < ir.index("_grid(ptr %crp")
    assert "%kbdone = icmp eq i64 %kbnext, 2" in ir and "%gcdone = icmp eq i64 %gcnext, 2" in ir \
        and "%grdone = icmp eq i64 %grnext, 4" in ir
