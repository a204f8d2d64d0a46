"""Instruction-set features: LLVM's names for them and the names Linux gives the same features in
``/proc/cpuinfo``, per architecture. Plain data, no TVM.

Only features LLVM may use when it generates code for a kernel are listed (vector units, FMA,
dot products, bit manipulation, crypto). A feature LLVM enables for a CPU name but the machine
does not report is switched off in the host target: a VM may hide AVX-512 from a Zen 4 that LLVM
still calls ``znver4`` (code using it dies with SIGILL).
"""

from __future__ import annotations

from explorer.target.arches import arch_of  # noqa: F401  (the one reading of a triple)

# LLVM feature -> the /proc/cpuinfo flags that show it (any of them).
X86 = {
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

AARCH64 = {
    "neon": ("asimd",), "fp-armv8": ("fp",), "crc": ("crc32",), "aes": ("aes",), "sha2": ("sha2",),
    "sha3": ("sha3",), "dotprod": ("asimddp",), "fullfp16": ("asimdhp", "fphp"), "fp16fml": ("asimdfhm",),
    "rdm": ("asimdrdm",), "lse": ("atomics",), "rcpc": ("lrcpc",), "i8mm": ("i8mm",), "bf16": ("bf16",),
    "sve": ("sve",), "sve2": ("sve2",), "sme": ("sme",),
}

BY_ARCH = {"x86_64": X86, "aarch64": AARCH64}

# The widest vector unit a feature set gives, in bits (what "vector-width" tells TVM).
_WIDTHS = {"x86_64": (("avx512f", 512), ("avx", 256), ("sse", 128)), "aarch64": (("neon", 128),)}


def missing(llvm_features: set[str], cpu_flags: set[str], arch: str) -> list[str]:
    """The ISA features in ``llvm_features`` that a machine reporting ``cpu_flags`` lacks."""
    table = BY_ARCH.get(arch, {})
    return sorted(f for f in llvm_features if f in table and not any(flag in cpu_flags for flag in table[f]))


def vector_width(features: set[str], arch: str) -> int | None:
    """Bits of the widest vector register ``features`` allow (None: not known for ``arch``)."""
    for feature, bits in _WIDTHS.get(arch, ()):
        if feature in features:
            return bits
    return None


def isa_word(features: set[str], arch: str) -> str:
    """A short word for the widest vector ISA: avx512, avx2, avx, sse, sve, neon."""
    if arch == "x86_64":
        for feature, word in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse", "sse")):
            if feature in features:
                return word
    if arch == "aarch64":
        for feature, word in (("sve", "sve"), ("neon", "neon")):
            if feature in features:
                return word
    return arch or "generic"
