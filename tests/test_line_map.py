"""Issues 29 and 52: TVMScript <-> assembly line mapping (explorer/schedule/line_map.py), built
for each kind of CPU target (compile only: nothing runs, so any host checks every ISA): every
statement to its instructions, every loop header to its own loop control."""

from __future__ import annotations

import re

import pytest
import tvm

from explorer.kernels import builtin_kernel
from explorer.schedule.asm_loops import asm_loops, close_latches
from explorer.schedule.codegen import asm_stats, code_views, hot_loop
from explorer.schedule.defaults.apply import default_schedule
from explorer.schedule.line_map import block_ranges, loop_headers, mend_debug_info, one_loop_per_line, strip_debug
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import Step
from explorer.target import parse_target
from explorer.target.asm import AARCH64_ASM, ANY_ASM, X86_ASM

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


# -- issue 52: every loop header to its own loop control (Compiler Explorer's grade) -----------------

FIVE_STEPS = [Step("split", {"loop": "C/i", "factors": [None, 4]}),
              Step("split", {"loop": "C/j", "factors": [None, 16]}),
              Step("reorder", {"loops": ["C/i_0", "C/j_0", "C/k", "C/i_1", "C/j_1"]}),
              Step("vectorize", {"loop": "C/j_1"}), Step("parallel", {"loop": "C/i_0"})]
ISAS = ["cpu:x86-64-v3", "cpu:skylake-avx512", "aarch64:cortex-a76"]  # AVX2, AVX-512, NEON: three vocabularies


@pytest.fixture(scope="module", params=ISAS)
def five_steps(request):
    session = ScheduleSession(builtin_kernel("matmul", M=512, N=512, K=512).func)
    session.apply_all(FIVE_STEPS)
    target = parse_target(request.param)
    return code_views(session.mod, target), target


def test_each_loop_header_lights_its_own_loop_control(five_steps):
    views, target = five_steps
    m, syntax = views.mapping, target.asm
    asm = m.asm.splitlines()
    lines = {var: m.loop(var).line for var in ("i_0", "j_0", "k", "i_1", "j_1")}
    assert len(set(lines.values())) == 5, lines  # T.grid written out: a line per loop
    own = {var: set(m.asm_lines_of(line)) for var, line in lines.items()}
    for var in ("i_0", "j_0", "k"):  # loops that stay loops: their own increment, compare and branch
        assert own[var], var
        assert any(syntax.branch_target(asm[no - 1]) for no in own[var]), (var, [asm[no - 1] for no in own[var]])
        assert not any(syntax.is_fma(asm[no - 1]) for no in own[var]), var
    assert not own["i_0"] & own["j_0"] and not own["j_0"] & own["k"] and not own["i_0"] & own["k"]
    # i_1 is unrolled by LLVM and j_1 vectorized: no loop control of their own, and they say so
    assert not own["i_1"] and not own["j_1"]
    assert "vectorized" in m.notes()[lines["j_1"]] and "unrolled" in m.notes()[lines["i_1"]]
    sets = [frozenset(own[v]) for v in ("i_0", "j_0", "k")]
    assert len(set(sets)) == 3
    # the FMAs of the hot loop belong to the compute statement, and the hot loop is the innermost (k's)
    update = next(no for no, text in enumerate(m.source.splitlines(), 1) if " + A[" in text)
    hot = range(views.hot.first, views.hot.last + 1)
    fma = [no for no in hot if syntax.is_fma(asm[no - 1])]
    assert fma and {m.source_line_of(no) for no in fma} == {update}
    assert own["k"] & set(hot) and not own["j_0"] & set(hot)


def test_the_hot_loop_is_mapped_and_its_share_is_counted(five_steps):
    views, target = five_steps
    share = views.hot_mapped
    assert share is not None and share.instructions > 0
    assert share.percent >= 90, (share, views.mapping.asm.splitlines()[views.hot.first - 1:views.hot.last])
    # the share counts what it says: instructions of the hot loop with a line
    m = views.mapping
    lines = m.asm.splitlines()[views.hot.first - 1:views.hot.last]
    assert share.instructions == sum(target.asm.is_instruction(text) for text in lines)


def test_a_searched_schedule_maps_its_hot_loop():
    """A schedule drawn from MetaSchedule's sketches (what a search measures) on a small matmul."""
    from explorer.tvm_fast import light_tensor_intrin
    from search.sketches import generate_sketches, sample_schedule

    light_tensor_intrin()
    kernel = builtin_kernel("matmul", M=128, N=128, K=128)
    target = parse_target("cpu:x86-64-v3")
    for sketch in generate_sketches(kernel, target):
        session = ScheduleSession(kernel.func)
        session.apply_all(sample_schedule(kernel, sketch, target, seed=0))
        views = code_views(session.mod, target)
        assert views.hot_mapped is not None and views.hot_mapped.percent >= 90, (sketch.index, views.hot_mapped)
        loops = views.mapping.loops
        control = [h for h in loops if views.mapping.asm_lines_of(h.line)]
        assert any(set(views.mapping.asm_lines_of(h.line)) & set(range(views.hot.first, views.hot.last + 1))
                   for h in control), "the hot loop's own control maps to its header"


def test_a_grid_is_written_out_one_loop_per_line():
    src = ("    for i_0 in T.parallel(8):\n        for j_0, k, i_1 in T.grid(32, T.min(n, 4), 4):\n"
           "            for j_1 in T.vectorized(16):\n                C[0] = 1\n\n            B[0] = 2\n    D = 3\n")
    out = one_loop_per_line(src)
    assert out.splitlines() == [
        "    for i_0 in T.parallel(8):", "        for j_0 in range(32):", "            for k in range(T.min(n, 4)):",
        "                for i_1 in range(4):", "                    for j_1 in T.vectorized(16):",
        "                        C[0] = 1", "", "                    B[0] = 2", "    D = 3"]
    assert [(h.line, h.var, h.kind) for h in loop_headers(out)] == [
        (1, "i_0", "parallel"), (2, "j_0", "serial"), (3, "k", "serial"), (4, "i_1", "serial"),
        (5, "j_1", "vectorized")]


def test_loop_control_in_llvm_ir_gets_its_loops_line():
    """The latch's compare, branch and increment, named by TVM's ``for_end_<var>`` block, get the
    line of ``for <var>``; a load without a line gets its user's, a store its value's; the rest
    keeps LLVM's."""
    ir = "\n".join([
        "define void @f(ptr %a, i64 %n) !dbg !3 {",
        "entry:",
        "  br label %for_body_k",
        "for_body_k:",
        "  %k = phi i64 [ 0, %entry ], [ %k.next, %for_body_k ]",
        "  %p = getelementptr float, ptr %a, i64 %k",
        "  %x = load float, ptr %p, align 4",
        "  %y = fadd float %x, 1.0, !dbg !6",
        "  store float %y, ptr %p, align 4, !dbg !6",
        "  %k.next = add nuw nsw i64 %k, 1, !dbg !6",
        "  %done = icmp eq i64 %k.next, %n, !dbg !5",
        "  br i1 %done, label %for_end_k, label %for_body_k, !dbg !5",
        "for_end_k:",
        "  store float %y, ptr %a, align 4, !dbg !5",
        "  ret void, !dbg !5",
        "}",
        "!3 = distinct !DISubprogram(name: \"f\", scope: !1, file: !1, unit: !0)",
        "!5 = !DILocation(line: 0, scope: !3)",
        "!6 = !DILocation(line: 9, column: 4, scope: !3)",
    ])
    out = mend_debug_info(ir, {"k": 7})
    meta = dict(re.findall(r"^(!\d+) = (.*)$", out, re.MULTILINE))

    def line_of(text):
        found = re.search(re.escape(text) + r".*!dbg (!\d+)", out)
        return int(re.search(r"line: (\d+)", meta[found.group(1)]).group(1)) if found else 0

    assert line_of("%k.next = add") == line_of("%done = icmp") == line_of("br i1 %done") == 7
    assert line_of("%x = load") == line_of("%p = getelementptr") == 9  # the statement that uses them
    assert line_of("store float %y, ptr %a") == 9  # a store LLVM sank out of the loop: the statement's
    assert line_of("%y = fadd") == 9 and line_of("ret void") == 0  # LLVM's own lines stay


def test_natural_loops_are_found_whatever_the_layout():
    """LLVM may put a loop's latch above its header (AVX-512's k loop below); the inner loop is
    the hot one though the outer holds more FMAs (a peeled first iteration), and a latch's
    increments LLVM's code generator made without a line get the loop's."""
    asm = [
        "f:", "\txorl\t%eax, %eax", "\tjmp\t.LBB0_2",                                   # 1-3
        ".LBB0_5:", "\tincq\t%r12", "\tcmpq\t$32, %r12", "\tje\t.LBB0_6",                  # 4-7: outer latch, above
        ".LBB0_2:", "\tvfmadd231ps\t%zmm1, %zmm2, %zmm3", "\tvfmadd231ps\t%zmm1, %zmm2, %zmm4",  # 8-10: peel
        ".LBB0_4:", "\tvfmadd231ps\t(%r15), %zmm2, %zmm3", "\ttestq\t%rbp, %rbp", "\tje\t.LBB0_5",  # 11-14
        "\taddq\t$2, %rbp", "\tjmp\t.LBB0_4",                                              # 15-16: inner latch
        ".LBB0_6:", "\tretq",                                                              # 17-18
    ]
    loops = asm_loops(asm, X86_ASM)
    assert [(a.header, a.first, a.last, a.depth) for a in loops] == [(8, 4, 16, 0), (11, 11, 16, 1)]
    assert hot_loop("\n".join(asm), X86_ASM).first == 11
    sources = [0, 0, 0, 0, 5, 5, 5, 0, 9, 9, 0, 9, 6, 6, 0, 0, 0, 0]
    close_latches(asm, sources, {5, 6}, X86_ASM)
    assert sources[14:16] == [6, 6] and sources[1] == 0  # the inner latch's add and jump; the entry stays


def test_an_aarch64_listing_reads_with_its_own_vocabulary():
    asm = [".LBB0_1:", "\tfmla\tv0.4s, v1.4s, v2.4s", "\tadd\tx6, x6, #2048  // step", "\ttbz\tw1, #3, .LBB0_1",
           "\tret"]
    assert AARCH64_ASM.branch_target(asm[3]) == ".LBB0_1" and ANY_ASM.branch_target(asm[3]) == ""
    assert [(a.first, a.last) for a in asm_loops(asm, AARCH64_ASM)] == [(1, 4)]
    assert AARCH64_ASM.is_fma(asm[1]) and not X86_ASM.is_fma(asm[1])
