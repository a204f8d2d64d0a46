"""Where a built model spends its time: time per fused kernel on the target, beside its share of
the total, its GFLOPS and % of this machine's measured peak, its % of its roofline, and where its
schedule came from (a record or the default); ONNX Runtime's own per-node profile beside it.

Each kernel is read against the peak of its instruction family (:mod:`explorer.measure.families`):
a bf16 kernel against the bf16 units' peak (AMX ``tdpbf16ps`` or ``vdpbf16ps``), an int8 one against
the int8 units' (GOPS), the rest against the fp32 FMA peak; its roofline and headroom too, and a
kernel above its family's peak raises that peak only. Its roofline's bandwidth is that of where its
bytes fit: the L1 caches, the L2 caches, the L3, or memory (:mod:`explorer.measure.memory_roof`).

This is the loop the literature recommends: search first, then profile, then put human effort where
the time goes. The work is in files with one job each, all importable from here:

- :mod:`export.profile_rows`: a kernel's row (:class:`KernelTime`) and the rows from the instrument's calls;
- :mod:`export.roofline`: a kernel's roofline;
- :mod:`export.profile_peaks`: the peaks the rows read against, checked by them;
- :mod:`export.profile_result`: :class:`Profile`, the whole profile as data;
- :mod:`export.profile_run`: the profiling run (a bundle in a fresh process, ONNX Runtime's profile);
- :mod:`export.profile_text`: its sentences (the headroom line, the notes).
"""

from __future__ import annotations

from export.profile_result import OrtNode, Profile
from export.profile_rows import KernelTime, Rows, TaskCost, kernel_rows, task_cost
from export.profile_run import instrument_cost, ort_profile, profile_export, profile_workload
from export.profile_text import headroom_line, tiers_text
from export.profile_peaks import checked_peak, checked_peaks, checked_roof, checked_rows, unsure_above_peak
from export.roofline import PEAK_CAP, PEAK_SHARE, roofline_bound, roofline_gflops, roofline_peak

__all__ = ["PEAK_CAP", "PEAK_SHARE", "KernelTime", "OrtNode", "Profile", "Rows", "TaskCost", "checked_peak",
           "checked_peaks", "checked_roof", "checked_rows", "headroom_line", "instrument_cost", "kernel_rows",
           "ort_profile", "profile_export", "profile_workload", "roofline_bound", "roofline_gflops", "roofline_peak",
           "task_cost", "tiers_text", "unsure_above_peak"]
