"""Export: deployable CPU and CUDA libraries from the chosen schedules, verified.

``run_export(ExportSpec(...))`` is the whole flow the command line and the Export page run
(records chosen, the in-model check, the export, the signature); ``run_bench``, ``run_profile`` and
``run_sweep`` are the other front ends' (:mod:`export.entry`). Which schedules ship is answered once,
by ``shipped_schedules`` (:mod:`export.shipping`), for all of them. ``export_workload(spec, "cpu",
"out/")`` builds a model or kernel with the schedules given per
task (default schedules elsewhere, with a warning), writes a bundle (library, parameters,
manifest with hashes, README, a runner that needs only apache-tvm), and verifies it: in a fresh
process against ONNX Runtime or numpy, layer by layer for ONNX models, and for CUDA by checking
thread binding and compiling the kernels with nvcc. :mod:`export.bench` times it
against ONNX Runtime.

Importing this package is free: names load on first use, so ``python -m
export.verify_bundle`` pulls in no more than it needs.
"""

from __future__ import annotations

from store.lazy import lazy_names

_NAMES = {
    "ExportError": "errors", "BundleError": "errors",
    "TaskSchedule": "schedules", "TaskOutcome": "schedules",
    "Built": "build", "build": "build", "workload_tasks": "build",
    "read_manifest": "bundle", "zip_bundle": "bundle",
    "Verification": "verify", "verify_folder": "verify",
    "LayerReport": "layers", "compare_layers": "layers",
    "ExportReport": "flow", "export_workload": "flow", "ElfCheck": "elf_check", "check_elf": "elf_check",
    "TaskChoice": "choose", "best_schedules": "choose", "task_choices": "choose", "schedules_for": "choose",
    "BenchReport": "bench", "bench_workload": "bench", "bench_bundle": "bench",
    "ExportSpec": "entry", "ExportResult": "entry", "run_export": "entry",
    "BenchSpec": "entry", "BenchResult": "entry", "run_bench": "entry",
    "ProfileSpec": "entry", "ProfileResult": "entry", "run_profile": "entry",
    "SweepSpec": "entry", "run_sweep": "entry",
    "ShipSpec": "shipping", "Shipped": "shipping", "shipped_schedules": "shipping",
}


__getattr__ = lazy_names(__name__, _NAMES)


__all__ = sorted(_NAMES)
