"""The frame of every schedx AMX kernel function: the declarations, the tile configuration, the
entry that asks Linux for tile state once per process and loads the configuration, and the release
at its end. The lowest of the AMX IR modules (:mod:`.amx_ir` and :mod:`.amx_groups` build on it).

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


__all__ = ["DECLARATIONS", "RELEASE", "entry", "tile_config"]
