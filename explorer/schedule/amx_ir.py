"""The LLVM IR pieces every schedx AMX kernel shares (:mod:`explorer.schedule.bf16_dot`'s ``tdpbf16ps``,
:mod:`explorer.schedule.amx_int8`'s ``tdpbusd``): the C tile grids, the convolutions' tile walks and
their registration; the function frame (declarations, tile configuration, the permission request
and ``ldtilecfg`` at entry, ``tilerelease`` at the end) is :mod:`explorer.schedule.amx_frame`'s,
re-exported here.
"""

from __future__ import annotations

from explorer.schedule.amx_frame import DECLARATIONS, RELEASE, entry, tile_config  # noqa: F401 (re-exported)
from explorer.schedule.amx_groups import GroupLoop, groups_ir, offset


def c_tiles(m: int, mt: int, nt: int, out_rows: int = 1) -> tuple[str, str, str]:
    """The IR that points at, loads and stores an ``mt x nt`` grid of C tiles (tmm0.., row by row)
    of ``m`` rows of 16 32-bit sums, from ``%c`` with ``%ldc`` bytes a row: (pointers, loads, stores).
    ``out_rows``: the grid's tile rows spread over that many output rows, ``%cyr`` bytes apart."""
    tiles = [(r, q, r * nt + q) for r in range(mt) for q in range(nt)]
    pointers = "\n".join(f"{_row_offset('c', t, r, m, mt // out_rows)}\n  %coff{t} = add i64 %crow{t}, {64 * q}\n"
                         f"  %cp{t} = getelementptr i8, ptr %c, i64 %coff{t}" for r, q, t in tiles)
    loads = "\n".join(f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %cp{t}, i64 %ldc)" for _, _, t in tiles)
    stores = "\n".join(f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %cp{t}, i64 %ldc)" for _, _, t in tiles)
    return pointers, loads, stores


def _row_offset(x: str, name: int, r: int, m: int, per_row: int) -> str:
    """``%{x}row{name}``: the byte offset of tile row ``r`` (``m`` rows of ``%ld{x}`` bytes) in a grid
    of ``per_row`` tile rows an output row, the next output row ``%{x}yr`` bytes on."""
    if per_row == 0 or r < per_row:  # (one output row: the IR as before)
        return f"  %{x}row{name} = mul i64 %ld{x}, {m * r}"
    return (f"  %{x}rowx{name} = mul i64 %ld{x}, {m * (r % per_row)}\n"
            f"  %{x}rowy{name} = mul i64 %{x}yr, {r // per_row}\n"
            f"  %{x}row{name} = add i64 %{x}rowx{name}, %{x}rowy{name}")


def conv_tiles_ir(fn: str, product: str, m: int, mt: int, nt: int, kstep: int, *, zero_c: bool = False,
                  row_groups: int = 1, col_groups: int = 1, out_rows: int = 1) -> str:
    """The LLVM IR of a convolution's tile call ``@fn``: an ``mt x nt`` grid of C tiles (``m`` rows
    of 16 32-bit sums) kept in tile registers over every tap, each tap's reduction ``kstep`` bytes
    of A a ``product`` (``tdpbf16ps``, ``tdpbusd``): ``mt`` A tiles of ``m`` rows x ``kstep``
    bytes read ``%lda`` bytes apart from the tap's first pixel, ``nt`` B tiles of ``kstep / 4``
    rows x 64 bytes (``%bpanel`` bytes apart: a panel of 16 output channels).

    Arguments: C and its row bytes, A (the padded NHWC input at the tile's first pixel) and its
    row, input-row and input-column bytes, ``%kw`` (taps per input row), ``%taps``, B (the tile's
    first panel) and ``%kbytes`` (A bytes per tap, a multiple of ``kstep``). ``zero_c``: the C tiles
    start from ``tilezero`` instead of being loaded (a call that computes the whole sum: no load of
    the zeros just stored, which waits for those stores to drain). ``row_groups`` x ``col_groups``:
    the call computes that many such grids, the next rows ``m mt`` A rows and C rows on, the next
    channels ``16 nt`` on, after one ``ldtilecfg`` (each waits for the previous call's tiles to
    drain); the default, one grid, emits the same IR as before. ``out_rows`` > 1: the ``mt`` tile
    rows are ``mt / out_rows`` a row of that many output rows (two more arguments: ``%ayr``,
    ``%cyr``, the A and C bytes from one output row to the next); no groups then; ``out_rows`` > ``mt``
    (rows of one tile each): the grid walks the rows ``mt`` at a time, then the rows left one at a
    time, all after one ``ldtilecfg`` (:func:`_sweep_ir`). Where one register
    per A tile does not fit beside the C and B tiles (a 4 x 1 grid), the A tiles take two registers
    in turn (:func:`a_registers`), each loaded just before its products."""
    a_regs = a_registers(mt, nt)
    if out_rows > 1 and row_groups * col_groups > 1:
        raise ValueError("a call over several output rows computes one grid")
    config = tile_config(fn + "_cfg", [m] * (mt * nt + a_regs) + [kstep // 4] * nt,
                         [64] * (mt * nt) + [kstep] * a_regs + [64] * nt)
    head = f"""
{config}
{DECLARATIONS}
declare void @llvm.x86.{product}(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilezero(i8 immarg)
"""
    grid = _grid_ir(product, m, mt, nt, kstep, zero_c, min(out_rows, mt), mt * nt, mt * nt + a_regs, a_regs)
    if out_rows > mt:  # whole output rows mt at a time, one tile a row, the rest a row at a time
        return head + _sweep_ir(fn, product, m, mt, nt, kstep, zero_c, out_rows, grid)
    if row_groups * col_groups > 1:  # the grid's code a function of its own (no ldtilecfg), called per group
        return head + _groups_ir(fn, m * mt, nt, row_groups, col_groups) + f"""
define internal i32 @{fn}_grid({_ARGS}) alwaysinline {{
go:{grid}
  ret i32 0
}}
"""
    return head + f"""define i32 @{fn}({_ARGS}{_ROWS_ARGS if out_rows > 1 else ""}) {{
{entry(fn + "_cfg")}{grid}
{RELEASE}
  ret i32 0
}}
"""


def _grid_ir(product: str, m: int, mt: int, nt: int, kstep: int, zero_c: bool, out_rows: int, a0: int, b0: int,
             a_regs: int) -> str:
    """The code of one grid of :func:`conv_tiles_ir` from block ``go`` on: C tiles tmm0.., A tiles from
    ``tmm{a0}`` (``a_regs`` registers), B tiles from ``tmm{b0}``; ends after the C tiles' stores."""
    tiles = [(r, q, r * nt + q) for r in range(mt) for q in range(nt)]
    cptrs, cload, cstore = c_tiles(m, mt, nt, out_rows)
    if zero_c:
        cload = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" for _, _, t in tiles)
    a_loads = [[_row_offset("a", r, r, m, mt // out_rows), f"  %aoff{r} = add i64 %arow{r}, %i",
                f"  %ap{r} = getelementptr i8, ptr %abase, i64 %aoff{r}",
                f"  call void @llvm.x86.tileloadd64(i8 {a0 + r % a_regs}, ptr %ap{r}, i64 %lda)"] for r in range(mt)]
    b_loads = ["  %bi = mul i64 %i, 16"]
    for q in range(nt):
        b_loads += [f"  %bq{q} = mul i64 %bpanel, {q}", f"  %boff{q} = add i64 %bq{q}, %bi",
                    f"  %bp{q} = getelementptr i8, ptr %bbase, i64 %boff{q}",
                    f"  call void @llvm.x86.tileloadd64(i8 {b0 + q}, ptr %bp{q}, i64 64)"]
    products = [[f"  call void @llvm.x86.{product}(i8 {t}, i8 {a0 + r % a_regs}, i8 {b0 + q})" for rr, q, t in tiles
                 if rr == r] for r in range(mt)]
    if a_regs == mt:  # every A tile a register of its own: all loads, then all products
        body = [line for r in range(mt) for line in a_loads[r]] + b_loads + [line for p in products for line in p]
    else:  # the B tiles first, then each A tile, loaded into the register the A tile two before used
        body = b_loads + [line for r in range(mt) for line in a_loads[r] + products[r]]
    nl = "\n"
    return f"""
  %bpanel0 = mul i64 %taps, %kbytes
  %bpanel = mul i64 %bpanel0, 16
{cptrs}
{cload}
  br label %tap
tap:
  %t = phi i64 [0, %go], [%tnext, %tapend]
  %rh = udiv i64 %t, %kw
  %rw = urem i64 %t, %kw
  %ah = mul i64 %rh, %ldh
  %aw = mul i64 %rw, %ldw
  %at = add i64 %ah, %aw
  %abase = getelementptr i8, ptr %a, i64 %at
  %bt = mul i64 %t, %kbytes
  %bt16 = mul i64 %bt, 16
  %bbase = getelementptr i8, ptr %b, i64 %bt16
  br label %loop
loop:
  %i = phi i64 [0, %tap], [%next, %loop]
{nl.join(body)}
  %next = add i64 %i, {kstep}
  %done = icmp eq i64 %next, %kbytes
  br i1 %done, label %tapend, label %loop
tapend:
  %tnext = add i64 %t, 1
  %tdone = icmp eq i64 %tnext, %taps
  br i1 %tdone, label %end, label %tap
end:
{cstore}"""


def _sweep_ir(fn: str, product: str, m: int, mt: int, nt: int, kstep: int, zero_c: bool, out_rows: int,
              grid: str) -> str:
    """``@fn`` over ``out_rows`` whole output rows of one tile each (``m`` pixels): the configuration
    loaded once, then ``@fn_rows`` (the ``mt x nt`` grid over ``mt`` rows) for each ``mt`` rows,
    ``%ayr`` / ``%cyr`` A / C bytes a row apart, then ``@fn_row`` (a ``1 x nt`` grid: the first C,
    A and B registers of the same configuration) for each row left (7 rows: 3 pairs and 1)."""
    steps, left = divmod(out_rows, mt)
    a_regs = a_registers(mt, nt)
    row = _grid_ir(product, m, 1, nt, kstep, zero_c, 1, mt * nt, mt * nt + a_regs, 1)
    rest = "\n".join(f"""  %lefta{r} = mul i64 %ayr, {steps * mt + r}
  %leftc{r} = mul i64 %cyr, {steps * mt + r}
  %leftap{r} = getelementptr i8, ptr %a, i64 %lefta{r}
  %leftcp{r} = getelementptr i8, ptr %c, i64 %leftc{r}
  %leftres{r} = call i32 @{fn}_row(ptr %leftcp{r}, i64 %ldc, ptr %leftap{r}, i64 %lda, i64 %ldh, i64 %ldw, \
i64 %kw, i64 %taps, ptr %b, i64 %kbytes)""" for r in range(left))
    return f"""define internal i32 @{fn}_rows({_ARGS}{_ROWS_ARGS}) alwaysinline {{
go:{grid}
  ret i32 0
}}

define internal i32 @{fn}_row({_ARGS}) alwaysinline {{
go:{row}
  ret i32 0
}}

define i32 @{fn}({_ARGS}{_ROWS_ARGS}) {{
{entry(fn + "_cfg")}
  %stepa = mul i64 %ayr, {mt}
  %stepc = mul i64 %cyr, {mt}
  br label %step
step:
  %s = phi i64 [0, %go], [%snext, %step]
  %sa = mul i64 %s, %stepa
  %sc = mul i64 %s, %stepc
  %sap = getelementptr i8, ptr %a, i64 %sa
  %scp = getelementptr i8, ptr %c, i64 %sc
  %sres = call i32 @{fn}_rows(ptr %scp, i64 %ldc, ptr %sap, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, i64 %taps, \
ptr %b, i64 %kbytes, i64 %ayr, i64 %cyr)
  %snext = add i64 %s, 1
  %sdone = icmp eq i64 %snext, {steps}
  br i1 %sdone, label %rest, label %step
rest:
{rest}
{RELEASE}
  ret i32 0
}}
"""


def register_once(name: str, funcs) -> str:
    """Register the tensor intrinsic ``name`` (its description and implementation from ``funcs()``)
    once per process; returns ``name``."""
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *funcs())
    return name


def names_in(trace: object, prefix: str, pattern) -> set[tuple[str, ...]]:
    """The fields (``pattern``'s groups) of every intrinsic name starting ``prefix`` that a trace (JSON
    or text) names: what a replay registers before it tensorizes."""
    text = str(trace)
    return set(pattern.findall(text)) if prefix in text else set()


TILE_REGISTERS = 8  # tmm0-tmm7: the C, A and B tiles of one call


def a_registers(mt: int, nt: int) -> int:
    """Tile registers a call's ``mt`` A tiles take beside its ``mt x nt`` C and ``nt`` B tiles: one
    each where they fit, else two in turn (each A tile feeds its ``nt`` products and is done: a grid
    of 4 x 1 C tiles takes 4 + 2 + 1 registers, and loads one B tile per 4 products, not 2 per 4)."""
    return mt if mt * nt + mt + nt <= TILE_REGISTERS else 2


_ARGS = "ptr %c, i64 %ldc, ptr %a, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, i64 %taps, ptr %b, i64 %kbytes"
_ROWS_ARGS = ", i64 %ayr, i64 %cyr"  # a call over several output rows: A and C bytes from one to the next


def _groups_ir(fn: str, rows: int, nt: int, row_groups: int, col_groups: int) -> str:
    """``@fn``: the tile configuration loaded once, then ``@fn_grid`` for each group of ``rows``
    A/C rows (``%lda`` / ``%ldc`` bytes a row) and ``16 nt`` channels (``nt`` B panels)
    (:func:`explorer.schedule.amx_groups.groups_ir`)."""
    setup = ["  %gpanel0 = mul i64 %taps, %kbytes", f"  %gpanel = mul i64 %gpanel0, {16 * nt}",
             f"  %cstep = mul i64 %ldc, {rows}", f"  %astep = mul i64 %lda, {rows}"]
    rows_on = (offset("crp", "c", "gr", "%cstep"), offset("arp", "a", "gr", "%astep"))
    cols_on = (offset("ccp", "crp", "gc", 64 * nt), offset("bcp", "b", "gc", "%gpanel"))
    loops = [GroupLoop("rowgroup", "gr", row_groups, rows_on), GroupLoop("colgroup", "gc", col_groups, cols_on)]
    call = (f"  %res = call i32 @{fn}_grid(ptr %ccp, i64 %ldc, ptr %arp, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, "
            "i64 %taps, ptr %bcp, i64 %kbytes)")
    return groups_ir(fn, _ARGS, setup, loops, call)


__all__ = ["DECLARATIONS", "RELEASE", "TILE_REGISTERS", "a_registers", "c_tiles", "conv_tiles_ir", "entry", "names_in",
           "register_once", "tile_config"]
