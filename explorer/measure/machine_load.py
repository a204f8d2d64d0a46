"""How busy this machine is with other work: what a timing taken here is worth.

Timings of parallel kernels on a machine where other processes run are inflated many times (a
parallel region waits for its slowest thread, and a descheduled thread waits a whole time slice:
small_cnn ran 0.05 ms quiet and 10-20 ms beside two busy loops on 2 cores). So profiles and
benchmarks sample, while schedx itself is idle, how many cores other processes keep busy
(``/proc/stat``), and say so beside their figures; other schedx processes timing kernels (the
measuring lock's holder) are named too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

BUSY_CORES = 0.5  # other processes keeping this many cores busy make timings unreliable


def _busy_and_total() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass(frozen=True)
class MachineLoad:
    """Cores kept busy by other processes (sampled while this one slept), of ``cores``."""

    other_cores: float
    cores: int
    measuring: str = ""  # another schedx process timing kernels now ("" when none)

    @property
    def busy(self) -> bool:
        return self.other_cores >= BUSY_CORES or bool(self.measuring)

    def note(self) -> str:
        """A sentence for a report when the machine was busy ("" when it was quiet)."""
        if not self.busy:
            return ""
        parts = []
        if self.other_cores >= BUSY_CORES:
            parts.append(f"other processes kept {self.other_cores:.1f} of {self.cores} cores busy")
        if self.measuring:
            parts.append(f"{self.measuring} was timing kernels")
        return ("the machine was busy while this ran (" + "; ".join(parts) + "): parallel kernels wait for "
                "descheduled threads, so these times are inflated; run again on a quiet machine to compare")

    def worst(self, other: MachineLoad) -> MachineLoad:
        return self if (self.other_cores, bool(self.measuring)) >= (other.other_cores, bool(other.measuring)) \
            else other


def machine_load(sample_s: float = 0.3) -> MachineLoad:
    """Sample the machine for ``sample_s`` seconds while this process sleeps (see the module docstring)."""
    cores = os.cpu_count() or 1
    before = _busy_and_total()
    time.sleep(sample_s)
    after = _busy_and_total()
    other = 0.0
    if before and after and after[1] > before[1]:
        other = cores * (after[0] - before[0]) / (after[1] - before[1])
    return MachineLoad(round(other, 2), cores, _measuring_now())


def _measuring_now() -> str:
    from explorer.measure.lock import lock_status

    try:
        holder = lock_status()["holder"]
    except OSError:
        return ""
    if not holder or holder.get("pid") == os.getpid():
        return ""
    return f"pid {holder['pid']} ({holder.get('what') or 'schedx measure'})"


__all__ = ["BUSY_CORES", "MachineLoad", "machine_load"]
