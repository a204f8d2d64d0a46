"""Check a library built for another architecture without running it: an ELF shared object of the
target's machine type that exports the entry points TVM's runtime looks for.

``readelf`` is not needed: the ELF header and the dynamic symbol table are read here (64-bit,
little-endian, which is what schedx cross-compiles for).
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explorer.target.arches import CPU_ARCHES

MACHINES = {arch.elf_machine: arch.name for arch in CPU_ARCHES.values()}  # the ELF header's e_machine
# What `tvm.runtime.load_module` needs from a Relax executable's shared library.
REQUIRED_SYMBOLS = ("__tvm_ffi__library_bin",)


@dataclass(frozen=True)
class ElfCheck:
    """``ok`` when the file is a shared library for ``expected`` with the runtime's entry points."""

    expected: str
    machine: str = ""
    shared: bool = False
    symbols: tuple[str, ...] = field(default=())
    missing: tuple[str, ...] = field(default=())
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.shared and self.machine == self.expected and not self.missing

    def summary(self) -> str:
        if self.error:
            return f"library check failed: {self.error}"
        if self.ok:
            return (f"{self.expected} ELF shared library with {len(self.symbols)} exported symbols, including the "
                    f"TVM runtime's {', '.join(REQUIRED_SYMBOLS)}")
        problems = []
        if self.machine != self.expected:
            problems.append(f"machine {self.machine or 'unknown'}, expected {self.expected}")
        if not self.shared:
            problems.append("not a shared library")
        if self.missing:
            problems.append(f"missing {', '.join(self.missing)}")
        return "library check failed: " + "; ".join(problems)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ok=self.ok, summary=self.summary(), symbols=list(self.symbols)[:50])
        return d


def _dynamic_symbols(data: bytes, shoff: int, shentsize: int, shnum: int) -> list[str]:
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 11 or not entsize:  # SHT_DYNSYM
            continue
        str_offset = sections[link][4]
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, offset + k * entsize)
            if st_shndx == 0 or not st_name:  # undefined: imported, not exported
                continue
            end = data.index(b"\0", str_offset + st_name)
            out.append(data[str_offset + st_name:end].decode(errors="replace"))
    return out


def check_elf(path: str | Path, expected_arch: str) -> ElfCheck:
    """Read ``path``'s ELF header and dynamic symbols (see the module docstring)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        return ElfCheck(expected_arch, error=f"cannot read {path}: {err.strerror}")
    if data[:4] != b"\x7fELF":
        return ElfCheck(expected_arch, error=f"{Path(path).name} is not an ELF file")
    if data[4] != 2 or data[5] != 1:
        return ElfCheck(expected_arch, error="not a 64-bit little-endian ELF file")
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    try:
        symbols = _dynamic_symbols(data, shoff, shentsize, shnum)
    except (struct.error, ValueError, IndexError) as err:
        return ElfCheck(expected_arch, MACHINES.get(e_machine, str(e_machine)), e_type == 3,
                        error=f"unreadable symbol table ({err})")
    missing = tuple(s for s in REQUIRED_SYMBOLS if s not in symbols)
    return ElfCheck(expected_arch, MACHINES.get(e_machine, str(e_machine)), e_type == 3, tuple(sorted(symbols)), missing)


__all__ = ["ElfCheck", "check_elf"]
