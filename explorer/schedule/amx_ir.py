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
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)"""


def tile_config(name: str, rows: list[int]) -> str:
    """The 64-byte tile configuration ``@name``: palette 1, tiles tmm0.. of 64 bytes a row with
    ``rows[t]`` rows each, the rest unused."""
    used = len(rows)
    cfg = ["1"] + ["0"] * 15 + ["64", "0"] * used + ["0", "0"] * (16 - used) + [str(r) for r in rows] + \
        ["0"] * (16 - used)
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


__all__ = ["DECLARATIONS", "c_tiles", "entry", "tile_config"]
