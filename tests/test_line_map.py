"""Issue 29: TVMScript <-> assembly line mapping (explorer/schedule/line_map.py), built for each
kind of CPU target (compile only: nothing runs, so any host checks every ISA)."""

from __future__ import annotations

import re

import pytest
import tvm

from explorer.kernels import builtin_kernel
from explorer.schedule.codegen import asm_stats, code_views
from explorer.schedule.defaults.apply import default_schedule
from explorer.schedule.line_map import block_ranges, mend_debug_info, strip_debug
from explorer.target import parse_target

_FMA = re.compile(r"^\s*(v?fn?m(add|sub)\w*|fml[as])\s", re.IGNORECASE)


def _default(spec: str):
    target = parse_target(spec)
    func, _ = default_schedule(builtin_kernel("matmul", M=128, N=128, K=128).func, target.cpu_spec())
    return tvm.IRModule({"main": func}), target


@pytest.mark.parametrize("spec", ["cpu:x86-64-v4", "cpu:x86-64-v3", "aarch64:cortex-a76"])
def test_every_multiply_add_leads_back_to_the_update_and_its_loops(spec):
    mod, target = _default(spec)
    views = code_views(mod, target)
    m = views.mapping
    assert m is not None and "T.parallel" in m.source  # the outlined parallel body is mended
    fma = [no for no, line in enumerate(m.asm.splitlines(), 1) if _FMA.match(line)]
    assert fma, m.asm[:1500]
    lines = m.source.splitlines()
    updates = {m.source_line_of(no) for no in fma}  # the main tile's update, and a tail tile's where there is one
    assert updates and 0 not in updates, updates
    for src in updates:
        assert re.search(r"\w+\[.*\] = \w+\[.*\] \+ A\[.*\] \* B\[.*\]", lines[src - 1]), lines[src - 1]
        # the reduction loop around it stands for its whole body: its FMAs light up from the loop's line
        k_loop = max(a for a, b in m.blocks if a < src <= b and re.match(r"\s*for .*\bk", lines[a - 1]))
        assert {no for no in fma if m.source_line_of(no) == src} <= set(m.asm_lines_of(*m.block_of(k_loop)))
    # the same code as the plain build, the debug directives taken out
    plain, mapped = asm_stats(views.asm), asm_stats(m.asm)
    assert (mapped.instructions, mapped.fma) == (plain.instructions, plain.fma)
    assert ".loc" not in m.asm and ".debug_" not in m.asm
    assert views.hot is not None and views.hot.fma > 0
    hot = range(views.hot.first, views.hot.last + 1)
    assert {m.source_line_of(no) for no in hot if _FMA.match(m.asm.splitlines()[no - 1])} <= updates


def test_no_mapping_for_a_gpu_target():
    from explorer.schedule.codegen import _reparsed_for

    mod, cpu = _default("cpu:x86-64-v3")
    assert _reparsed_for(mod, parse_target("cuda:sm_80")) is None  # asked before anything is built
    assert _reparsed_for(mod, cpu) is not None


def test_a_function_without_a_debug_subprogram_gets_one_of_its_own():
    ir = "\n".join([
        "define i32 @f(ptr %a) !dbg !3 {",
        "  ret i32 0, !dbg !5",
        "}",
        "define private i32 @__tvm_parallel_lambda(i32 %t) {",
        "entry:",
        "  %x = add i32 %t, 1, !dbg !6",
        "    #dbg_value(i32 %t, !7, !DIExpression(), !5)",
        "  %y = call i32 @g(i32 %x)",
        "  ret i32 %y, !dbg !5",
        "}",
        "!3 = distinct !DISubprogram(name: \"f\", scope: !1, file: !1, unit: !0, retainedNodes: !4)",
        "!5 = !DILocation(line: 0, scope: !3)",
        "!6 = !DILocation(line: 22, column: 25, scope: !3)",
    ])
    mended = mend_debug_info(ir)
    lam = mended.split("@__tvm_parallel_lambda", 1)[1].split("\n}", 1)[0]
    sub = re.search(r"!dbg !(\d+) \{", lam).group(1)
    assert f'!{sub} = distinct !DISubprogram(name: "__tvm_parallel_lambda"' in mended
    assert "retainedNodes" not in mended.split(f"!{sub} = ", 1)[1].splitlines()[0]
    assert "#dbg_value" not in lam and re.search(r"call i32 @g\(i32 %x\), !dbg !\d+", lam)
    loc = re.search(r"add i32 %t, 1, !dbg !(\d+)", lam).group(1)
    assert f"!{loc} = !DILocation(line: 22, column: 25, scope: !{sub})" in mended
    assert mended.split("@__tvm_parallel_lambda")[0] == ir.split("@__tvm_parallel_lambda")[0]  # f untouched


def test_directives_go_and_each_instruction_keeps_the_last_location():
    asm = "\n".join(["f:", "\t.file\t1 \".\" \"k\"", "\t.loc\t1 7 3", ".Ltmp0:", "\tvaddps\t%ymm0, %ymm1, %ymm2",
                     "\t.cfi_def_cfa_offset 16", ".LBB0_1:", "\tvfmadd231ps\t%ymm0, %ymm1, %ymm2", "\t.loc\t1 0 0",
                     "\tret", "\t.section\t.debug_abbrev,\"\",@progbits", "\t.byte\t1", "\t.section\t.note.GNU-stack"])
    text, lines = strip_debug(asm)
    assert text.splitlines() == ["f:", "\tvaddps\t%ymm0, %ymm1, %ymm2", ".LBB0_1:", "\tvfmadd231ps\t%ymm0, %ymm1, %ymm2",
                                 "\tret", "\t.section\t.note.GNU-stack"]
    assert lines == (0, 7, 0, 7, 0, 0)
    # AArch64 comments are '//' lines: not instructions
    arm = "\n".join(["\t.loc\t1 9 0", "// %bb.0:", "\t// =>This Inner Loop Header: Depth=1",
                     "\tfmla\tv0.4s, v1.4s, v2.4s", "\tb.ne\t.LBB0_1  // in Loop: Header=BB0_1 Depth=1"])
    assert strip_debug(arm)[1] == (0, 0, 9, 9)


def test_a_loop_stands_for_its_indented_body():
    src = "def f():\n    for i in range(4):\n        for j in range(4):\n            A[i] = 1\n\n        B[i] = 2\n    C = 3\n"
    assert block_ranges(src) == ((2, 6), (3, 4))
