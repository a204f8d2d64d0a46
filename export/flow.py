"""One export from start to end: load, build with the chosen schedules, write the bundle, verify.

Verification depends on the target: a CPU bundle runs in a fresh process against the reference;
a device bundle gets its target's own checks of the device code (``target.device_code``: for CUDA,
:mod:`explorer.target.cuda_check`) and runs on the device too when one is visible. Models from
ONNX are also compared layer by layer (:mod:`export.layers`). The verification is added to the
manifest afterwards (the manifest's own text is not hashed, so the file hashes stay valid).

A bf16 bundle whose outputs fail verification is built once more, from the model as written, with
every matmul in fp32 (:data:`explorer.precision.MATMULS_FP32`: the class that carried most of a deep
model's bf16 error, maxvit_t's), where the first build computed any in bf16; that bundle is the one
published, its warnings saying why, what the first one's error was and what is left in bf16. Its
records are the first build's by workload key (those of the first build's bf16 matmul kernels do not
apply, said). Where that build is refused, the first bundle is published, NOT VERIFIED, saying why.
An export that does not verify (``verify=False``: the in-model check's) never builds again.
``schedx bench`` and ``profile`` verify their bf16 builds, so they time the bundle export ships, and
:func:`bf16_shipped_note` says which it is beside their figures.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from export import bundle as bundle_io
from export import folders
from export.build import Built, Progress, build
from export.elf_check import ElfCheck, check_elf
from export.layers import LayerReport, compare_layers
from export.schedules import TaskSchedule, by_key
from export.verify import DYNAMIC_QUANT_TOLERANCE, Verification, verification_rule, verify_folder
from explorer import interrupts
from explorer.errors import ExplorerError
from explorer.target import DeviceCode, Target, parse_target
from explorer.workload import Workload, load_workload


@dataclass
class ExportReport:
    """What an export produced and what the checks found."""

    folder: Path
    manifest: dict
    built: Built
    verification: Verification | None = None
    layers: LayerReport | None = None
    device: DeviceCode | None = None  # the target's checks of its device code (None: a CPU's library)
    elf: ElfCheck | None = None
    seconds: dict = field(default_factory=dict)
    # a bf16 bundle built a second time, every matmul in fp32: why (the first build's failure), else ""
    rebuilt: str = ""
    # such a second build's kernels the first build did not have (its fp32 matmuls): records of a bf16 search
    # never reach them
    unreached: tuple[str, ...] = ()
    # a bf16 bundle that failed verification and could not be built again: why ("" otherwise)
    rebuild_error: str = ""

    @property
    def device_check(self):
        """The result of the target's device-code checks (``ok``, ``summary()``), None for a CPU."""
        return self.device.check if self.device is not None else None

    cuda = device_check  # (its name while CUDA was the only device kind; pages and tests still read it)

    @property
    def warnings(self) -> list[str]:
        return list(self.manifest.get("warnings", []))

    @property
    def ok(self) -> bool:
        """Every check that ran passed (a bundle this machine cannot run is not run: see
        :attr:`verified`)."""
        v = self.verification
        checks = [v.ok if v is not None and v.status != "skipped" else True,
                  self.layers.ok if self.layers and not self.layers.error else True,
                  self.device_check.ok if self.device_check else True,
                  self.elf.ok if self.elf else True]
        return all(checks)

    @property
    def verified(self) -> bool:
        """The bundle itself ran and matched its reference (on this machine or its GPU)."""
        return self.verification is not None and self.verification.ok

    @property
    def verdict(self) -> str:
        """One sentence that agrees with the checks: verified, failed (which check), or built but
        not run here (why)."""
        v = self.verification
        if not self.ok:
            failed = [name for name, check in (("the bundle's outputs", v if v and v.status != "skipped" else None),
                                               ("the layer-by-layer check", self.layers if self.layers and
                                                not self.layers.error else None),
                                               (self.device.title if self.device else "", self.device_check),
                                               ("the library check", self.elf)) if check is not None and not check.ok]
            return f"NOT VERIFIED: {' and '.join(failed)} failed{self._evidence()}; do not deploy this bundle"
        if self.verified:
            return f"verified: {v.summary()}{self._evidence(worst=False)}"
        why = v.why if v is not None else "no check of the outputs ran"
        return f"built, not run here ({why}); the checks that could run passed"

    def _evidence(self, worst: bool = True) -> str:
        """What a user needs to judge the verdict: the worst element of the outputs and the rule it
        was held to (``worst``), and the layer where TVM and ONNX Runtime first part."""
        v, text = self.verification, ""
        if worst and v is not None and not v.ok and v.status != "skipped":
            detail = _worst(v)
            text += f" ({detail})" if detail else ""
        if self.layers is not None and self.layers.growth():
            text += (f"; layer by layer (TVM without this bundle's schedules, against ONNX Runtime), "
                     f"{self.layers.growth()}")
            if v is not None and v.status == "failed" and self.layers.ok:
                text += ": the layers agree, so the difference is in the bundle's own kernels"
        return text

    def to_dict(self) -> dict:
        return {"folder": str(self.folder), "ok": self.ok, "seconds": self.seconds,
                "workload": self.manifest["workload"], "target": self.manifest["target"],
                "tasks": self.manifest["tasks"], "warnings": self.warnings,
                "verification": self.manifest.get("verification", {}), "precision": self.manifest.get("precision")}


def _manifest(workload: Workload, target: Target, built: Built, *, tolerance: float) -> dict:
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
        "compiler": target.compiler or "default",
        "reference": workload.reference_label, "tolerance": tolerance,
        "compile_seconds": built.compile_seconds, "compile_stages": built.seconds,
    }


def export_workload(workload: str | Workload, target: str | Target, out_dir: str | Path, *,
                    schedules: Mapping[str, TaskSchedule] | None = None, shapes: str | None = None,
                    verify: bool = True, layers: bool = True, threads: int | None = None, nvcc: bool = True,
                    seed: int = 0, progress: Progress | None = None, notes: list[str] | None = None,
                    force: bool = False, precision: str = "fp32", calibration=None) -> ExportReport:
    """Export ``workload`` for ``target`` into ``out_dir`` (see the module docstring).

    ``schedules`` maps task names or workload keys to the schedule to apply (tasks left out use
    the default); ``precision``: fp32, bf16 or int8 (:mod:`explorer.precision`: a bf16 bundle is
    verified at its own stated tolerance, recorded in the manifest; an int8 bundle is the QDQ model
    quantized with ``calibration``, verified against ONNX Runtime running that model, the
    quantizer's own figures against the float model in the manifest's ``precision``; a workload
    already built at ``precision``, :func:`export.build.as_built`'s, is taken as it is); ``layers`` runs the
    layer-by-layer comparison for ONNX models; ``notes`` are
    warnings the caller found while choosing records (they join the manifest's). ``out_dir`` is
    new, empty or an earlier bundle, whose user files are kept (``force``: any folder; see
    :mod:`export.folders`)."""
    say = progress or (lambda stage, frac: None)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    say("loading", 0.0)
    if isinstance(target, str):
        target = parse_target(target)  # threads are a run-time setting: the target (and its records) stay the same
    folder = Path(out_dir).expanduser().resolve()  # relative to the caller's working directory, now
    folders.check_destination(folder, force=force)  # before anything is built
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    from export.build import as_built

    workload = as_built(workload, target, precision, calibration)[0]  # what is built, and its reference
    _check_memory(workload)
    seconds["load"] = time.perf_counter() - start
    staging = folders.staging_folder(folder, force=force)  # written and verified there, then moved to folder whole
    try:
        report = _export(workload, target, folder, staging, schedules=schedules, verify=verify, layers=layers,
                         threads=threads, nvcc=nvcc, seed=seed, say=say, notes=notes, seconds=seconds,
                         precision=precision)
        built = report.built.workload if report.built is not None else workload  # (untiled convolutions in fp32)
        if _retries(report, built):  # the bf16 bundle failed: built again with its matmuls in fp32
            report, staging = _matmuls_fp32(report, built, target, folder, staging, schedules=schedules,
                                            verify=verify, layers=layers, threads=threads, nvcc=nvcc, seed=seed,
                                            say=say, notes=notes, seconds=seconds, force=force, precision=precision)
        interrupts.check()  # a Ctrl-C something below swallowed: nothing is published
        folders.publish(staging, folder, force=force)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    seconds["total"] = time.perf_counter() - start
    say("done", 1.0)
    return report


def _export(workload: Workload, target: Target, folder: Path, staging: Path, *, schedules, verify: bool,
            layers: bool, threads: int | None, nvcc: bool, seed: int, say: Progress, notes: list[str] | None,
            seconds: dict[str, float], precision: str = "fp32", layers_of: LayerReport | None = None) -> ExportReport:
    """One build of ``workload`` into ``staging``; ``layers_of``: the layer-by-layer comparison an earlier
    build of the same ONNX model made (it depends on the model and the inputs alone), reused."""
    from explorer.fault_points import hold
    from explorer.measure.verify import tolerance

    mark = time.perf_counter()
    built = build(workload, target, schedules, progress=say, precision=precision)
    built.warnings.extend(notes or [])
    seconds["build"] = time.perf_counter() - mark

    mark = time.perf_counter()
    say("computing the reference", 0.55)
    inputs = workload.sample_inputs(seed)
    references = workload.reference(inputs, threads=threads)
    seconds["reference"] = time.perf_counter() - mark

    mark = time.perf_counter()
    say("checking the device code", 0.6)
    device = target.device_code(built.lowered, built.executable, compile=nvcc)
    extra: dict[str, tuple[str, bytes]] = dict(device.files) if device is not None else {}
    if device is not None:
        seconds["device_check"] = time.perf_counter() - mark

    mark = time.perf_counter()
    say("writing the bundle", 0.65)
    rule = verification_rule(workload.onnx_model, built.precision.tolerance if built.precision is not None else None,
                             output_dtype=workload.outputs[0][2] if workload.outputs else None,
                             output_count=len(workload.outputs))  # bf16: held to its own stated bound, per output
    manifest = _manifest(workload, target, built, tolerance=rule.rtol)
    if built.precision is not None:
        manifest["precision"] = built.precision.to_dict()
    if rule.float16_inside:  # the model's own float16 tensors stay float16: TVM computes them in float16, as written
        manifest["computed_in"] = "float16"
    atols = list(rule.output_atol)
    if atols:
        manifest["output_atol"] = atols
    if any(rule.activations):  # an output made by a sigmoid, tanh or softmax is judged by the scale of its input
        manifest["output_activation"] = list(rule.activations)
    manifest = bundle_io.write_bundle(staging, executable=built.executable, manifest=manifest, inputs=inputs,
                                      references=references, param_names=[p.name for p in built.params],
                                      param_values=built.param_values, extra_files=extra, compiler=target.compiler)
    seconds["write"] = time.perf_counter() - mark
    hold("export.written")  # (the fault-injection suite's kill -9 between writing and publishing)

    report = ExportReport(folder=folder, manifest=manifest, built=built, device=device, seconds=seconds)
    if target.cross:
        report.elf = check_elf(staging / bundle_io.LIB, target.arch)
    if verify:
        mark = time.perf_counter()
        say("verifying in a fresh process", 0.7)
        report.verification = _verify(staging, target, threads)
        seconds["verify"] = time.perf_counter() - mark
    if layers and workload.onnx_model is not None and atols:
        built.warnings.append("layer-by-layer comparison skipped: the int8 (QDQ) model's layers are compared by its "
                              "outputs, within a few quantization steps")
        manifest["warnings"] = list(built.warnings)
    elif layers and workload.onnx_model is not None and layers_of is not None:
        report.layers = layers_of
    elif layers and workload.onnx_model is not None:
        mark = time.perf_counter()
        say("comparing layer by layer with ONNX Runtime", 0.85)
        if rule.dynamic_quantized:  # its layers within the same tolerance, DynamicQuantizeLSTMs as computed
            from explorer.models.dynamic_quant import layer_reference

            reference = layer_reference(workload.onnx_model)
            report.layers = compare_layers(reference, inputs, threads=threads, tolerance=DYNAMIC_QUANT_TOLERANCE)
            if reference is not workload.onnx_model:
                built.warnings.append("layer by layer, ONNX Runtime ran the model with its DynamicQuantizeLSTM layers "
                                      "in float, as the bundle computes them (inside them it quantizes at every step)")
                manifest["warnings"] = list(built.warnings)
        else:
            report.layers = compare_layers(workload.onnx_model, inputs, threads=threads,
                                           **({"tolerance": tolerance("float16")} if rule.float16_inside else {}))
        seconds["layers"] = time.perf_counter() - mark
    manifest["verification"] = {
        "fresh_process": report.verification.to_dict() if report.verification else None,
        "layers": _layers_summary(report.layers),
        "device": {"title": device.title, **device.check.to_dict()} if device else None,
        "library": report.elf.to_dict() if report.elf else None, "verdict": report.verdict,
    }
    (staging / bundle_io.MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    return report


def _retries(report: ExportReport, workload: Workload) -> bool:
    """Whether ``workload``'s bundle is built again with every matmul in fp32: a bf16 build with its
    matmuls in bf16 whose outputs failed verification."""
    first, v = workload.precision, report.verification
    return (first is not None and first.name == "bf16" and not first.matmuls_fp32 and v is not None
            and v.status == "failed")


def _matmuls_fp32(first: ExportReport, workload: Workload, target: Target, folder: Path, staging: Path, *,
                  schedules, force: bool, say: Progress, notes: list[str] | None,
                  **export) -> tuple[ExportReport, Path]:
    """``(report, staging)``: the bundle ``workload`` (built at bf16, failed verification in
    ``staging``) built again with every matmul in fp32 in a second staging folder, when that build
    computes fewer products in bf16; else the first (none of its matmuls was in bf16; or that build was
    refused: its warnings say why). The second progresses in [0.9, 1); the records go by workload key
    (:func:`export.schedules.by_key`)."""
    from explorer.precision import with_matmuls_fp32

    say("building again with every matmul in fp32", 0.9)
    second = folders.staging_folder(folder, force=force, attempt="matmuls-fp32")
    try:
        again, precision = with_matmuls_fp32(workload, target)
        if precision.converted >= workload.precision.converted:  # its matmuls were fp32 already
            shutil.rmtree(second, ignore_errors=True)
            return first, staging
        again = again.for_target(target)
        left = bf16_left(precision.converted) + ("" if precision.converted else ": this bundle computes in fp32")
        why = (f"the bf16 build with its matmuls in bf16 failed verification ({_worst(first.verification)}); this "
               f"bundle is built again with every matmul in fp32 ({left})")
        keyed = by_key(schedules, first.built.outcomes)
        lost = _records_lost(first.built.outcomes, again)
        report = _export(again, target, folder, second, schedules=keyed, say=_within(say, 0.9),
                         notes=[*(notes or []), why, *lost], layers_of=first.layers, **export)
    except ExplorerError as err:  # the first bundle is published, NOT VERIFIED, saying why there is no second
        shutil.rmtree(second, ignore_errors=True)
        first.rebuild_error = (f"the bf16 build failed verification, and building it again with every matmul in "
                               f"fp32 failed: {err}")
        first.built.warnings.append(first.rebuild_error)
        first.manifest["warnings"] = list(first.built.warnings)
        (staging / bundle_io.MANIFEST).write_text(json.dumps(first.manifest, indent=2, default=str))
        return first, staging
    except BaseException:
        shutil.rmtree(second, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    report.rebuilt = why
    had = {o.task.key for o in first.built.outcomes}
    report.unreached = tuple(o.task.name for o in report.built.outcomes if o.task.key not in had)
    return report, second


def export_to_time(workload: Workload, target: Target, folder: Path, *, schedules, threads: int | None,
                   precision: str = "fp32") -> ExportReport:
    """Export ``workload`` into ``folder`` for a bench or a profile to time: at bf16 verified, so that the
    bundle is the one ``schedx export`` ships (built again with every matmul in fp32 where the first misses
    the bf16 tolerance); else not verified (nothing else is built twice); no layer-by-layer check."""
    return export_workload(workload, target, folder, schedules=schedules, verify=precision == "bf16", layers=False,
                           threads=threads, precision=precision)


def bf16_left(converted: int) -> str:
    """``2 convolutions still in bf16`` / ``nothing left in bf16``: what a bf16 build with every matmul in fp32
    computes in bf16."""
    return f"{converted} convolution{'s' if converted != 1 else ''} still in bf16" if converted else "nothing left in bf16"


def bf16_shipped_note(report: ExportReport, records: bool = True) -> str:
    """What a bench or a profile says of the bf16 bundle it times, exported with verification as
    ``schedx export --precision bf16`` exports it (and ships it; ``records``: False where it was built
    without records, ``--no-db``): verified at the bf16 tolerance, built again with every matmul in fp32
    (why), or not verified (the verdict, and why no second build was made); "" for a bundle with
    nothing in bf16."""
    built = report.built.precision
    if built is None or built.name != "bf16" or (not built.converted and not report.rebuilt):
        return ""
    head = f"the bf16 bundle as `schedx export --precision bf16{'' if records else ' --no-db'}` ships it"
    if report.rebuilt:
        head = f"{head}: {report.rebuilt}"
    return "; ".join([head, report.verdict, *([report.rebuild_error] if report.rebuild_error else [])])


def _records_lost(outcomes, again: Workload) -> list[str]:
    """A warning naming the first build's records whose kernels the second build lacks (its matmuls
    in bf16: they do not apply to the fp32 ones), none when there are none."""
    keys = {t.key for t in again.tasks()}
    lost = [o.task.name for o in outcomes if o.schedule == "record" and o.task.key not in keys]
    if not lost:
        return []
    one = len(lost) == 1
    return [f"{len(lost)} record{'' if one else 's'} of the bf16 build's matmul kernels "
            f"({', '.join(lost[:4])}{' and more' if len(lost) > 4 else ''}) {'does' if one else 'do'} not apply to "
            f"this build's fp32 matmuls, which run their default schedules"]


def _within(say: Progress, start: float) -> Progress:
    """``say`` for a stage of the export that runs in [``start``, 1)."""
    return lambda stage, frac: say(stage, start + (1 - start) * min(frac, 0.99))


def _worst(v: Verification) -> str:
    """A failed verification's worst element, in words (why it failed where no element did)."""
    from export.verify_bundle import describe_worst

    return describe_worst(v.worst) if v.worst is not None and not v.worst["ok"] else v.why


def _check_memory(workload: Workload) -> None:
    """Refuse, before anything is built or allocated, an export whose sample inputs, reference
    outputs and their copies (the bundle's files, the verifying process) would not fit in memory
    (``schedx export matmul:M=30000,...`` grew to 14 GB; a batch of 2e9 died of MemoryError)."""
    from explorer.measure.memory import buffer_bytes, check_memory, measure_bytes

    specs = [(shape, dtype, False) for _, shape, dtype in workload.inputs]
    specs += [(shape, dtype, True) for _, shape, dtype in workload.outputs]
    # a value that is no tensor (a shape, dtype "?") or has a symbolic dimension is left out
    specs = [s for s in specs if s[1] not in ("?", "") and all(isinstance(d, int) for d in s[0])]
    try:
        needed = measure_bytes(*buffer_bytes(specs))
    except Exception:  # noqa: BLE001 - a dtype TVM cannot size: no estimate, the export goes on as before
        return
    check_memory(needed, f"exporting {workload.name}")


def _verify(folder: Path, target: Target, threads: int | None) -> Verification:
    """Run the bundle in a fresh process where this machine can run it; otherwise say why not
    (running code for a CPU this machine is not would die with SIGILL)."""
    why = target.why_not_here()
    if why:
        return Verification("skipped", reference="", why=f"{why}: {target.stand_in}", device=target.device)
    return verify_folder(folder, threads=threads, device=target.device)


def _layers_summary(layers: LayerReport | None) -> dict | None:
    if layers is None:
        return None
    d = layers.to_dict()
    d.pop("layers")
    return d


__all__ = ["ExportReport", "bf16_left", "bf16_shipped_note", "export_to_time", "export_workload"]
