"""The LLVM IR pieces every schedx AMX kernel shares (:mod:`explorer.schedule.bf16_dot`'s ``tdpbf16ps``,
:mod:`explorer.schedule.amx_int8`'s ``tdpbusd``): the tile configuration, the declarations, and the
function entry that asks Linux for tile state once per process, then loads the configuration.

Linux grants a process its tile state only after ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; without it the first tile instruction raises SIGILL. The kernels make that
system call themselves (``syscall(158, 0x1023, 18)``), guarded by one flag shared by all of them
(``@schedx_amx_granted``, linkonce: one per library), so a bundle needs no loader help.
"""

from __future__ import annotations

DECLARATIONS = """@schedx_amx_granted = linkonce_odr global i32 0
declare i64 @syscall(i64, ...)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilerelease()"""
# a call's last act: the tile state back to its initial state (palette 0). Another library on the same
# thread may cache the configuration it loaded (ONNX Runtime's MLAS reloads only when both the rows and
# the widths of the current one differ from its own: left with ours, its tile instructions faulted,
# SIGILL); released, the thread's tiles are also not saved and restored on every context switch
RELEASE = "  call void @llvm.x86.tilerelease()"


def tile_config(name: str, rows: list[int], colsb: list[int] | None = None) -> str:
    """The 64-byte tile configuration ``@name``: palette 1, tiles tmm0.. with ``rows[t]`` rows of
    ``colsb[t]`` bytes each (64 where not given), the rest unused."""
    used = len(rows)
    widths = colsb or [64] * used
    cfg = ["1"] + ["0"] * 15 + [v for b in widths for v in (str(b), "0")] + ["0", "0"] * (16 - used) + \
        [str(r) for r in rows] + ["0"] * (16 - used)
    return f"@{name} = internal constant [64 x i8] [{', '.join('i8 ' + v for v in cfg)}], align 64"


def entry(config: str) -> str:
    """A kernel's first blocks: the permission request (once per process), then ``ldtilecfg`` of
    ``@config``; the code after it continues block ``go``."""
    return f"""entry:
  %granted = load i32, ptr @schedx_amx_granted
  %ask = icmp eq i32 %granted, 0
  br i1 %ask, label %perm, label %go
perm:
  ; arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18): SYS_arch_prctl is 158
  %r = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store i32 1, ptr @schedx_amx_granted
  br label %go
go:
  call void @llvm.x86.ldtilecfg(ptr @{config})"""


def c_tiles(m: int, mt: int, nt: int) -> tuple[str, str, str]:
    """The IR that points at, loads and stores an ``mt x nt`` grid of C tiles (tmm0.., row by row)
    of ``m`` rows of 16 32-bit sums, from ``%c`` with ``%ldc`` bytes a row: (pointers, loads, stores)."""
    tiles = [(r, q, r * nt + q) for r in range(mt) for q in range(nt)]
    pointers = "\n".join(f"  %crow{t} = mul i64 %ldc, {m * r}\n  %coff{t} = add i64 %crow{t}, {64 * q}\n"
                         f"  %cp{t} = getelementptr i8, ptr %c, i64 %coff{t}" for r, q, t in tiles)
    loads = "\n".join(f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %cp{t}, i64 %ldc)" for _, _, t in tiles)
    stores = "\n".join(f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %cp{t}, i64 %ldc)" for _, _, t in tiles)
    return pointers, loads, stores


def conv_tiles_ir(fn: str, product: str, m: int, mt: int, nt: int, kstep: int, *, zero_c: bool = False,
                  row_groups: int = 1, col_groups: int = 1) -> str:
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
    drain); the default, one grid, emits the same IR as before."""
    a0, b0 = mt * nt, mt * nt + mt
    tiles = [(r, q, r * nt + q) for r in range(mt) for q in range(nt)]
    cptrs, cload, cstore = c_tiles(m, mt, nt)
    if zero_c:
        cload = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" for _, _, t in tiles)
    body = []
    for r in range(mt):
        body += [f"  %arow{r} = mul i64 %lda, {m * r}", f"  %aoff{r} = add i64 %arow{r}, %i",
                 f"  %ap{r} = getelementptr i8, ptr %abase, i64 %aoff{r}",
                 f"  call void @llvm.x86.tileloadd64(i8 {a0 + r}, ptr %ap{r}, i64 %lda)"]
    body.append("  %bi = mul i64 %i, 16")
    for q in range(nt):
        body += [f"  %bq{q} = mul i64 %bpanel, {q}", f"  %boff{q} = add i64 %bq{q}, %bi",
                 f"  %bp{q} = getelementptr i8, ptr %bbase, i64 %boff{q}",
                 f"  call void @llvm.x86.tileloadd64(i8 {b0 + q}, ptr %bp{q}, i64 64)"]
    body += [f"  call void @llvm.x86.{product}(i8 {t}, i8 {a0 + r}, i8 {b0 + q})" for r, q, t in tiles]
    config = tile_config(fn + "_cfg", [m] * (mt * nt + mt) + [kstep // 4] * nt,
                         [64] * (mt * nt) + [kstep] * mt + [64] * nt)
    nl = "\n"
    grouped = row_groups * col_groups > 1
    head = f"""
{config}
{DECLARATIONS}
declare void @llvm.x86.{product}(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilezero(i8 immarg)
"""
    if grouped:  # the grid's code a function of its own (no ldtilecfg), called per group
        head += _groups_ir(fn, m * mt, nt, row_groups, col_groups) + f"""
define internal i32 @{fn}_grid({_ARGS}) alwaysinline {{
go:"""
    else:
        head += f"""define i32 @{fn}({_ARGS}) {{
{entry(fn + "_cfg")}"""
    return head + f"""
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
{cstore}
{"" if grouped else RELEASE}
  ret i32 0
}}
"""


_ARGS = "ptr %c, i64 %ldc, ptr %a, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, i64 %taps, ptr %b, i64 %kbytes"


def _groups_ir(fn: str, rows: int, nt: int, row_groups: int, col_groups: int) -> str:
    """``@fn``: the tile configuration loaded once, then ``@fn_grid`` for each group of ``rows``
    A/C rows (``%lda`` / ``%ldc`` bytes a row) and ``16 nt`` channels (``nt`` B panels)."""
    return f"""define i32 @{fn}({_ARGS}) {{
{entry(fn + "_cfg")}
  %gpanel0 = mul i64 %taps, %kbytes
  %gpanel = mul i64 %gpanel0, {16 * nt}
  %cstep = mul i64 %ldc, {rows}
  %astep = mul i64 %lda, {rows}
  br label %rowgroup
rowgroup:
  %gr = phi i64 [0, %go], [%grnext, %rowgroupend]
  %cr = mul i64 %gr, %cstep
  %ar = mul i64 %gr, %astep
  %crp = getelementptr i8, ptr %c, i64 %cr
  %arp = getelementptr i8, ptr %a, i64 %ar
  br label %colgroup
colgroup:
  %gc = phi i64 [0, %rowgroup], [%gcnext, %colgroup]
  %cc = mul i64 %gc, {64 * nt}
  %ccp = getelementptr i8, ptr %crp, i64 %cc
  %bc = mul i64 %gc, %gpanel
  %bcp = getelementptr i8, ptr %b, i64 %bc
  %res = call i32 @{fn}_grid(ptr %ccp, i64 %ldc, ptr %arp, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, i64 %taps, ptr %bcp, i64 %kbytes)
  %gcnext = add i64 %gc, 1
  %gcdone = icmp eq i64 %gcnext, {col_groups}
  br i1 %gcdone, label %rowgroupend, label %colgroup
rowgroupend:
  %grnext = add i64 %gr, 1
  %grdone = icmp eq i64 %grnext, {row_groups}
  br i1 %grdone, label %groupsend, label %rowgroup
groupsend:
{RELEASE}
  ret i32 0
}}
"""


__all__ = ["DECLARATIONS", "RELEASE", "c_tiles", "conv_tiles_ir", "entry", "tile_config"]
