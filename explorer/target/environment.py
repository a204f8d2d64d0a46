"""Where a measurement was taken: the machine and software, as plain data.

The *hardware fingerprint* is a short stable string (CPU model, ISA level, cores) that keys
records: a schedule tuned on one machine only wins on another with the same fingerprint.
The *environment* is the fuller picture the seeds ask for with every figure (TVM version,
target, CPU flags, cores and threads, OS, time). Neither imports TVM unless asked for the
TVM version, so reading them is cheap.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

# Replaces the CPU flags /proc/cpuinfo reports (space- or comma-separated), to see how schedx
# behaves on a machine with fewer features than this one (tests use it; so can a user).
FLAGS_OVERRIDE = "SCHEDX_CPU_FLAGS"


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (``avx2``, ``avx512f``, ``asimd``, ...), or
    the ``SCHEDX_CPU_FLAGS`` override."""
    override = os.environ.get(FLAGS_OVERRIDE)
    if override is not None:
        return set(re.split(r"[\s,]+", override.strip())) - {""}
    return set(cpu_info()["flags"])


def _arch():
    """This machine's :class:`explorer.target.arches.CpuArch` (None: one schedx does not know)."""
    from explorer.target.arches import CPU_ARCHES, host_arch

    return CPU_ARCHES.get(host_arch())


def read_cpuinfo_flags(text: str, field: str) -> set[str]:
    """The flags a ``/proc/cpuinfo`` text lists on its ``field`` line (the architecture's
    :attr:`~explorer.target.arches.CpuArch.cpuinfo_field`: ``flags``, ``Features``)."""
    m = re.search(rf"^{re.escape(field)}\s*:\s*(.+)$", text, re.M)
    return set(m.group(1).split()) if m else set()


def _kernel_flags() -> tuple[str, ...]:
    arch = _arch()
    return arch.kernel_flags if arch is not None else ()


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict:
    """CPU model, vendor, the flags Linux reports, the ISA flags that matter for kernels, logical
    and usable cores (flags as read from /proc/cpuinfo: :func:`cpu_flags` applies the override)."""
    model, vendor, flags = platform.processor() or platform.machine(), "", set()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        model = m.group(1).strip() if m else model
        m = re.search(r"^vendor_id\s*:\s*(.+)$", text, re.M)
        vendor = m.group(1).strip() if m else ""
        arch = _arch()
        flags = read_cpuinfo_flags(text, arch.cpuinfo_field if arch is not None else "flags")
    except OSError:
        pass
    logical = os.cpu_count() or 1
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = logical
    return {"model": model, "vendor": vendor, "arch": platform.machine(), "flags": sorted(flags),
            "isa": [f for f in _kernel_flags() if f in flags], "logical_cores": logical, "usable_cores": usable}


THREADS = "TVM_NUM_THREADS"
# TVM pins each worker of its thread pool to a core of its own. A parallel loop is cut into one
# chunk per thread, fixed in advance, so when another process runs on a worker's core, every
# parallel kernel waits for that worker's turn on it: with two busy processes on a 2-core machine,
# a Whisper encoder ran 116 ms pinned against 1.38 ms unpinned (ONNX Runtime 1.52 ms), small_cnn
# 12 ms against 0.074 ms; on a quiet machine the two are within the noise (0.84/0.88 ms,
# 0.053/0.049 ms). Unpinned, the OS moves a waiting worker to whichever core frees first.
BIND_THREADS = "TVM_BIND_THREADS"


def threads_env(threads: int | None = None) -> dict[str, str]:
    """The environment for a process that runs kernels: ``TVM_NUM_THREADS`` set to ``threads``,
    else to what the user set, else to this machine's usable cores (TVM's own default is half
    the hardware threads on x86, assuming hyper-threading: one thread on a 2-core VM, while the
    target and the records say two); ``TVM_BIND_THREADS=0`` unless the user set it (see
    :data:`BIND_THREADS`)."""
    env = dict(os.environ)
    if threads:
        env[THREADS] = str(int(threads))
    elif not env.get(THREADS):
        env[THREADS] = str(cpu_info()["usable_cores"])
    env.setdefault(BIND_THREADS, "0")
    return env


def isa_flags() -> list[str]:
    """The flags that matter for kernels (AVX-512, AVX2, FMA, NEON, SVE, ...) this CPU reports."""
    flags = cpu_flags()
    return [f for f in _kernel_flags() if f in flags]


def isa_level() -> str:
    """The widest vector ISA the CPU reports, as a word (avx512, avx2, avx, sse, sve, neon; else
    the architecture): :func:`explorer.target.features.isa_word` of the features its flags show."""
    from explorer.target import features as isa

    arch = isa.arch_of(cpu_info()["arch"])
    flags = cpu_flags()
    shown = {f for f, names in isa.BY_ARCH.get(arch, {}).items() if any(n in flags for n in names)}
    return isa.isa_word(shown, arch)


def hardware_fingerprint() -> str:
    """``x86_64/AMD EPYC/avx512/2c``: the key under which measurements on this machine are kept."""
    c = cpu_info()
    model = re.sub(r"\s+", " ", c["model"]).strip() or "unknown cpu"
    return f"{c['arch']}/{model}/{isa_level()}/{c['usable_cores']}c"


@dataclass(frozen=True)
class Fingerprint:
    """A :func:`hardware_fingerprint` read back: ``x86_64/AMD EPYC/avx512/2c``."""

    arch: str
    model: str
    isa: str
    cores: str


def read_fingerprint(hardware: str) -> Fingerprint | None:
    """The parts of a machine fingerprint (None for an RPC device's ``rpc:KEY`` or another form)."""
    parts = hardware.split("/")
    if hardware.startswith("rpc:") or len(parts) < 4:
        return None
    return Fingerprint(parts[0], "/".join(parts[1:-2]), parts[-2], parts[-1])


@dataclass(frozen=True)
class Environment:
    """Everything that can change a measured figure besides the schedule itself."""

    hardware: str
    cpu_model: str
    cpu_flags: tuple[str, ...]
    cores: int
    threads: int
    os: str
    python: str
    tvm_version: str
    target: str
    time: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cpu_flags"] = list(self.cpu_flags)
        return d


def current_environment(target: str = "", threads: int | None = None) -> Environment:
    """The environment of a measurement taken now, here, for ``target`` (its JSON or name)."""
    import tvm

    c = cpu_info()
    return Environment(
        hardware=hardware_fingerprint(), cpu_model=c["model"], cpu_flags=tuple(isa_flags()), cores=c["usable_cores"],
        threads=threads or int(os.environ.get(THREADS) or c["usable_cores"]),
        os=f"{platform.system()} {platform.release()}", python=platform.python_version(),
        tvm_version=tvm.__version__, target=target, time=datetime.now(timezone.utc).isoformat(timespec="seconds"))
