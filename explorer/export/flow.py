"""One export from start to end: load, build with the chosen schedules, write the bundle, verify.

Verification depends on the target: a CPU bundle runs in a fresh process against the reference;
a CUDA bundle, without a GPU here, gets the checks of :mod:`explorer.export.cuda_check` (and runs
on the GPU too when one is visible). Models from ONNX are also compared layer by layer
(:mod:`explorer.export.layers`). The verification is added to the manifest afterwards (the
manifest's own text is not hashed, so the file hashes stay valid).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from explorer.export import bundle as bundle_io
from explorer.export.build import Built, Progress, build
from explorer.export.cuda_check import CudaCheck, check_cuda
from explorer.export.layers import LayerReport, compare_layers
from explorer.export.records import TaskSchedule
from explorer.export.targets import ExportTarget, parse_target
from explorer.export.verify import Verification, verify_folder
from explorer.export.workload import ExportWorkload, load_workload


@dataclass
class ExportReport:
    """What an export produced and what the checks found."""

    folder: Path
    manifest: dict
    built: Built
    verification: Verification | None = None
    layers: LayerReport | None = None
    cuda: CudaCheck | None = None
    seconds: dict = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return list(self.manifest.get("warnings", []))

    @property
    def ok(self) -> bool:
        """Every check that ran passed. A bundle for another CPU that cannot run here is not a failure;
        one for this CPU that cannot run is."""
        v = self.verification
        could_not_run = v is not None and v.status == "error" and not self.built.target.is_host_cpu
        checks = [v.ok if v is not None and not could_not_run else True,
                  self.layers.ok if self.layers and not self.layers.error else True,
                  self.cuda.ok if self.cuda else True]
        return all(checks)

    def to_dict(self) -> dict:
        return {"folder": str(self.folder), "ok": self.ok, "seconds": self.seconds,
                "workload": self.manifest["workload"], "target": self.manifest["target"],
                "tasks": self.manifest["tasks"], "warnings": self.warnings,
                "verification": self.manifest.get("verification", {})}


def _manifest(workload: ExportWorkload, target: ExportTarget, built: Built, *, tolerance: float) -> dict:
    def io(specs):
        return [{"name": n, "shape": list(s), "dtype": d} for n, s, d in specs]

    return {
        "workload": {**{k: v for k, v in workload.to_dict().items() if k not in ("inputs", "outputs")},
                     "hash": workload.workload_hash()},
        "inputs": io(workload.inputs), "outputs": io(workload.outputs),
        "params": [p.to_dict() for p in built.params],
        "target": target.to_dict(),
        "tasks": [o.to_dict() for o in built.outcomes],
        "records": {o.task.name: o.record_id for o in built.outcomes if o.schedule == "record"},
        "warnings": list(built.warnings),
        "reference": workload.reference_label, "tolerance": tolerance,
        "compile_seconds": built.compile_seconds, "compile_stages": built.seconds,
    }


def export_workload(workload: str | ExportWorkload, target: str | ExportTarget, out_dir: str | Path, *,
                    schedules: Mapping[str, TaskSchedule] | None = None, shapes: str | None = None,
                    verify: bool = True, layers: bool = True, threads: int | None = None, nvcc: bool = True,
                    seed: int = 0, progress: Progress | None = None) -> ExportReport:
    """Export ``workload`` for ``target`` into ``out_dir`` (see the module docstring).

    ``schedules`` maps task names or workload keys to the schedule to apply (tasks left out use
    the default); ``layers`` runs the layer-by-layer comparison for ONNX models."""
    from explorer.measure.verify import tolerance

    say = progress or (lambda stage, frac: None)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    say("loading", 0.0)
    if isinstance(target, str):
        target = parse_target(target)  # threads are a run-time setting: the target (and its records) stay the same
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    seconds["load"] = time.perf_counter() - start

    mark = time.perf_counter()
    built = build(workload, target, schedules, progress=say)
    seconds["build"] = time.perf_counter() - mark

    mark = time.perf_counter()
    say("computing the reference", 0.55)
    inputs = workload.sample_inputs(seed)
    references = workload.reference(inputs, threads=threads)
    seconds["reference"] = time.perf_counter() - mark

    extra: dict[str, tuple[str, bytes]] = {}
    cuda = None
    if target.device == "cuda":
        mark = time.perf_counter()
        say("checking the CUDA kernels (nvcc)", 0.6)
        cuda, source, cubin = check_cuda(built.lowered, built.executable, target.tvm_target(), compile_with_nvcc=nvcc)
        extra["kernels.cu"] = ("cuda-source", source.encode())
        if cubin:
            extra[f"kernels_{target.arch}.cubin"] = ("cubin", cubin)
        seconds["cuda_check"] = time.perf_counter() - mark

    mark = time.perf_counter()
    say("writing the bundle", 0.65)
    out_tolerance = tolerance(workload.outputs[0][2]) if workload.outputs else 1e-4
    manifest = _manifest(workload, target, built, tolerance=out_tolerance)
    folder = Path(out_dir)
    manifest = bundle_io.write_bundle(folder, executable=built.executable, manifest=manifest, inputs=inputs,
                                      references=references, param_names=[p.name for p in built.params],
                                      param_values=built.param_values, extra_files=extra)
    seconds["write"] = time.perf_counter() - mark

    report = ExportReport(folder=folder, manifest=manifest, built=built, cuda=cuda, seconds=seconds)
    if verify:
        mark = time.perf_counter()
        say("verifying in a fresh process", 0.7)
        report.verification = _verify(folder, target, threads)
        seconds["verify"] = time.perf_counter() - mark
    if layers and workload.onnx_model is not None:
        mark = time.perf_counter()
        say("comparing layer by layer with ONNX Runtime", 0.85)
        report.layers = compare_layers(workload.onnx_model, inputs, threads=threads)
        seconds["layers"] = time.perf_counter() - mark
    seconds["total"] = time.perf_counter() - start
    manifest["verification"] = {
        "fresh_process": report.verification.to_dict() if report.verification else None,
        "layers": _layers_summary(report.layers), "cuda": cuda.to_dict() if cuda else None,
    }
    (folder / bundle_io.MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    say("done", 1.0)
    return report


def _verify(folder: Path, target: ExportTarget, threads: int | None) -> Verification | None:
    if target.device == "cuda":
        import tvm

        if not tvm.cuda(0).exist:
            return None  # no GPU here: the CUDA checks stand in (gpu_check.py runs it on a card)
        return verify_folder(folder, threads=threads, device="cuda")
    return verify_folder(folder, threads=threads)


def _layers_summary(layers: LayerReport | None) -> dict | None:
    if layers is None:
        return None
    d = layers.to_dict()
    d.pop("layers")
    return d


__all__ = ["ExportReport", "export_workload"]
