"""A profile's sentences: its headroom line (which FLOP peaks and which memory tiers its rooflines
read against, and how many kernels each tier holds), and the notes of how the rows were taken.
``schedx profile`` and the model benchmark print them; the library never does.
"""

from __future__ import annotations

from collections import Counter

from explorer.measure.families import FP32
from export.profile_result import Profile
from export.profile_rows import KernelTime
from export.roofline import PEAK_SHARE


def roofline_peaks_text(profile: Profile) -> str:
    """The FLOP peaks of the kernels' rooflines, each family's with kernels in the model:
    ``326 GFLOPS`` (fp32 alone), ``bf16 3607 GFLOPS, fp32 326 GFLOPS`` (bf16 or int8 kernels)."""
    peaks = {FP32: profile.roofline_peak_gflops, **profile.roofline_peaks}
    families = list(dict.fromkeys(k.family for k in profile.kernels if k.ran and k.flops)) or [FP32]
    unit = {"int8": "GOPS"}

    def text(family: str, peak: float | None) -> str:
        if not peak:
            return f"no {family} peak"
        return ("" if families == [FP32] else f"{family} ") + f"{peak:.0f} {unit.get(family, 'GFLOPS')}"

    return ", ".join(text(f, peaks.get(f)) for f in families)


def tiers_text(profile: Profile) -> str:
    """The memory tiers of the rooflines (:meth:`explorer.measure.memory_roof.MemoryRoof.text`), with
    how many kernels' bytes fit in each: ``L2 204 GB/s up to 4.0 MB (21 kernels), L3 ... (9), memory
    25 GB/s beyond (0)``."""
    if profile.memory is None:
        return "no bandwidth measured"
    return profile.memory.text(Counter(k.tier for k in profile.kernels if k.ran and k.tier))


def headroom_line(profile: Profile, lead: str = "headroom", end: str = "about the most a search can take off "
                  "this model here") -> str | None:
    """``headroom: 3.1 ms (55% of the kernels' time) if every kernel ran at its roofline (...): ...``,
    None where the profile has no rooflines or no kernel time to share it out."""
    if profile.headroom_s is None or profile.kernels_s <= 0:
        return None
    return (f"{lead}: {profile.headroom_s * 1e3:.3g} ms ({profile.headroom_s / profile.kernels_s:.0%} of the kernels' "
            f"time) if every kernel ran at its roofline ({roofline_peaks_text(profile)}, or its FLOPs per byte times "
            f"the bandwidth its bytes can move at, each cache holding what it can, where lower: "
            f"{tiers_text(profile)}): {end}")


def run_notes(*, instrumented_s: float, plain_s: float, per_call: float, kernels: tuple[KernelTime, ...],
              rows_s: float, unsure: int) -> list[str]:
    """The notes of how the rows were taken: the instrument's cost taken out of them, the kernels
    left as bounds, the short ones whose % peak is left blank."""
    notes = [f"instrumented runs took {instrumented_s * 1e3:.2f} ms against {plain_s * 1e3:.2f} ms plain; the "
             f"instrument's own cost, {per_call * 1e6:.2f} us per timed call, is taken out of every row (rows add up "
             f"to {rows_s * 1e3:.3f} ms)"]
    bounds = [k for k in kernels if k.ran and not k.resolved]
    if bounds:
        notes.append(f"{len(bounds)} of {len(kernels)} kernels ran in less time than the instrument's cost took out "
                     f"of them: their rows show the time as timed, the most they took (< ms), and the rates it "
                     f"gives, lower bounds (≥); kernels that did not run say so")
    if unsure:
        notes.append(f"{unsure} short kernel(s) read above the peak or the roofline from a time too short to be sure "
                     f"(under {PEAK_SHARE:.0%} of the kernels' time): each figure of theirs above 100 % is left blank")
    return notes


__all__ = ["headroom_line", "roofline_peaks_text", "run_notes", "tiers_text"]
