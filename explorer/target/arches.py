"""What schedx knows of each CPU architecture it builds for, as data: one :class:`CpuArch` per
architecture in :data:`CPU_ARCHES`. The target objects, the default schedule rules and the
micro-kernels, the assembly views and the host's reading of ``/proc/cpuinfo`` read their
architecture's facts from here instead of testing its name, so a new architecture (say
``riscv64``) is one :class:`CpuArch`: an entry here, or :func:`register_arch` (a test adds a toy
one and takes it away again). Plain data, no imports of schedx or TVM besides
:mod:`explorer.target.asm` (data too)."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from explorer.target.asm import AARCH64_ASM, ANY_ASM, X86_ASM, AsmSyntax


@dataclass(frozen=True)
class CpuArch:
    """One CPU architecture.

    ``triple``: LLVM's; ``cross_compiler``: the C++ compiler that links a library for it on
    another machine; ``spellings``: what users type; ``example_cpus``: CPU names to suggest;
    ``elf_machine``: the ELF header's ``e_machine`` of its libraries;
    ``flags``: each ISA feature LLVM may use in a kernel and the ``/proc/cpuinfo`` flags that show
    it; ``widths``: (feature, bits) of its vector units, widest first; ``isa_words``: (feature,
    word) naming its vector ISAs, widest first (``avx512``, ``neon``); ``tensor_intrin``: the submodule of
    ``tvm.s_tir.tensor_intrin`` with its intrinsics ("": none); ``registers``: vector registers, and
    ``more_registers``: (feature, count) where a feature gives more; ``broadcast_below_bits``:
    vector widths under which a scalar broadcast costs an instruction of its own before an FMA
    (x86 before AVX-512: ``vbroadcastss``; 0: never); ``fma_feature``: the feature FMAs need ("":
    always there); ``int8_dot``: (features, instruction set) for int8 dot products, best first;
    ``bf16_dot``: the same for bf16 products with fp32 accumulation;
    ``narrower``: (feature, spelling) of the same CPU without its widest unit; ``compare_with``:
    other targets worth comparing its code with; ``asm``: how its assembly reads;
    ``cpuinfo_field``: the ``/proc/cpuinfo`` line that lists its flags (``flags`` on x86,
    ``Features`` on AArch64); ``kernel_flags``: the flags a measurement's environment records
    (those that change a kernel's speed); ``offered_cpu``: the CPU a target picker offers."""

    name: str
    triple: str
    cross_compiler: str
    spellings: tuple[str, ...]
    example_cpus: tuple[str, ...]
    elf_machine: int
    flags: dict[str, tuple[str, ...]]
    widths: tuple[tuple[str, int], ...]
    isa_words: tuple[tuple[str, str], ...]
    tensor_intrin: str
    registers: int
    more_registers: tuple[tuple[str, int], ...] = ()
    broadcast_below_bits: int = 0
    fma_feature: str = ""
    int8_dot: tuple[tuple[frozenset[str], str], ...] = ()
    bf16_dot: tuple[tuple[frozenset[str], str], ...] = ()
    narrower: tuple[tuple[str, str], ...] = ()
    compare_with: tuple[str, ...] = ()
    asm: AsmSyntax = ANY_ASM
    cpuinfo_field: str = "flags"
    kernel_flags: tuple[str, ...] = ()
    offered_cpu: str = ""

    @property
    def isa_ranks(self) -> tuple[str, ...]:
        """Its vector ISA words, narrowest first."""
        return tuple(word for _, word in reversed(self.isa_words))


# LLVM feature -> the /proc/cpuinfo flags that show it (any of them).
_X86 = {
    "sse": ("sse",), "sse2": ("sse2",), "sse3": ("pni", "sse3"), "ssse3": ("ssse3",),
    "sse4.1": ("sse4_1",), "sse4.2": ("sse4_2",), "sse4a": ("sse4a",),
    "avx": ("avx",), "avx2": ("avx2",), "fma": ("fma",), "fma4": ("fma4",), "f16c": ("f16c",),
    "bmi": ("bmi1",), "bmi2": ("bmi2",), "lzcnt": ("abm", "lzcnt"), "popcnt": ("popcnt",), "movbe": ("movbe",),
    "aes": ("aes",), "pclmul": ("pclmulqdq",), "sha": ("sha_ni",), "adx": ("adx",),
    "gfni": ("gfni",), "vaes": ("vaes",), "vpclmulqdq": ("vpclmulqdq",),
    "avx512f": ("avx512f",), "avx512dq": ("avx512dq",), "avx512cd": ("avx512cd",), "avx512bw": ("avx512bw",),
    "avx512vl": ("avx512vl",), "avx512ifma": ("avx512ifma",), "avx512vbmi": ("avx512vbmi",),
    "avx512vbmi2": ("avx512_vbmi2",), "avx512vnni": ("avx512_vnni",), "avx512bitalg": ("avx512_bitalg",),
    "avx512vpopcntdq": ("avx512_vpopcntdq",), "avx512bf16": ("avx512_bf16",), "avx512fp16": ("avx512_fp16",),
    "avx512vp2intersect": ("avx512_vp2intersect",), "avxvnni": ("avx_vnni",), "avxvnniint8": ("avx_vnni_int8",),
    "avxifma": ("avx_ifma",), "avxneconvert": ("avx_ne_convert",),
    "amx-tile": ("amx_tile",), "amx-int8": ("amx_int8",), "amx-bf16": ("amx_bf16",), "amx-fp16": ("amx_fp16",),
}

_AARCH64 = {
    "neon": ("asimd",), "fp-armv8": ("fp",), "crc": ("crc32",), "aes": ("aes",), "sha2": ("sha2",),
    "sha3": ("sha3",), "dotprod": ("asimddp",), "fullfp16": ("asimdhp", "fphp"), "fp16fml": ("asimdfhm",),
    "rdm": ("asimdrdm",), "lse": ("atomics",), "rcpc": ("lrcpc",), "i8mm": ("i8mm",), "bf16": ("bf16",),
    "sve": ("sve",), "sve2": ("sve2",), "sme": ("sme",),
}

CPU_ARCHES: dict[str, CpuArch] = {a.name: a for a in (
    CpuArch("x86_64", "x86_64-linux-gnu", "x86_64-linux-gnu-g++", ("x86_64", "x86-64"),
            ("x86-64-v3", "x86-64-v4", "haswell", "skylake-avx512", "icelake-server", "sapphirerapids", "znver3",
             "znver4"), 62, _X86, (("avx512f", 512), ("avx", 256), ("sse", 128)),
            (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse", "sse")), "x86",
            registers=16, more_registers=(("avx512f", 32),), broadcast_below_bits=512, fma_feature="fma",
            int8_dot=((frozenset({"avx512vnni", "avx512bw"}), "vnni"), (frozenset({"avx512bw"}), "avx512bw"),
                      (frozenset({"avx2"}), "avx2")),
            bf16_dot=((frozenset({"amx-bf16", "amx-tile", "avx512bf16"}), "amx"),
                      (frozenset({"avx512bf16", "avx512f"}), "avx512bf16")),
            narrower=(("avx512f", "cpu:-avx512f"),), compare_with=("cpu:x86-64-v2", "aarch64:cortex-a76"),
            asm=X86_ASM, kernel_flags=("avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "avx_vnni",
                                       "avx2", "fma"), offered_cpu="x86-64-v3"),
    CpuArch("aarch64", "aarch64-linux-gnu", "aarch64-linux-gnu-g++", ("aarch64", "arm64"),
            ("generic", "cortex-a55", "cortex-a76", "neoverse-n1", "neoverse-v1", "apple-m1"), 183, _AARCH64,
            (("neon", 128),), (("sve", "sve"), ("neon", "neon")), "arm_cpu", registers=32,
            compare_with=("cpu:generic", "x86_64:x86-64-v3"), asm=AARCH64_ASM, cpuinfo_field="Features",
            kernel_flags=("neon", "asimd", "sve"), offered_cpu="cortex-a76"),
)}


def register_arch(arch: CpuArch) -> None:
    """Make ``arch`` one of the architectures schedx builds for (parsed, listed, built, read)."""
    if arch.name in CPU_ARCHES:
        raise ValueError(f"the CPU architecture {arch.name!r} is already registered")
    CPU_ARCHES[arch.name] = arch


def unregister_arch(name: str) -> None:
    CPU_ARCHES.pop(name, None)


@contextmanager
def arch_registered(arch: CpuArch) -> Iterator[CpuArch]:
    """``arch`` registered inside the ``with`` block only (a test's toy architecture)."""
    register_arch(arch)
    try:
        yield arch
    finally:
        unregister_arch(arch.name)


def arch_of(triple: str) -> str:
    """``x86_64`` or ``aarch64`` (or the triple's first part) for an LLVM triple or a machine name."""
    head = (triple or "").split("-")[0].lower()
    for arch in CPU_ARCHES.values():
        if head == arch.name or head in arch.spellings or head == arch.triple.split("-")[0]:
            return arch.name
    return {"amd64": "x86_64"}.get(head, head)


def host_arch() -> str:
    """This machine's architecture, as :data:`CPU_ARCHES` names it."""
    return arch_of(platform.machine())


def cpu_intrinsics(arch: str) -> tuple[str, ...]:
    """The tensor-intrinsic submodules of a CPU architecture (every CPU's when it is unknown)."""
    known = [CPU_ARCHES[arch]] if arch in CPU_ARCHES else CPU_ARCHES.values()
    return tuple(a.tensor_intrin for a in known if a.tensor_intrin)


__all__ = ["CPU_ARCHES", "CpuArch", "arch_of", "arch_registered", "cpu_intrinsics", "host_arch", "register_arch",
           "unregister_arch"]
