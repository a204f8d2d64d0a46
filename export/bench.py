"""The seeds' three figures for a deployed model, beside ONNX Runtime (and PyTorch) on the same
input and thread count: compile time, first-inference latency, steady-state median and p90.

Rows are named ``tvm tuned`` (the store's records, defaults for the rest), ``tvm default`` (no
records: every kernel on the target's default schedule), ``onnxruntime``, and OpenVINO's
``openvino f32`` and ``openvino default (bf16)`` (:mod:`export.openvino_row`, where it is
installed); the details (record count, versions, load time) go in the row's note, and OpenVINO's
rows state their outputs' error against ONNX Runtime by schedx's own rule for the model (the row's
``error``: a bf16 anchor over the bound a schedx bf16 build must pass is not like for like). A row
and its timing helpers live in :mod:`export.rows`.

TVM is timed as deployed: the bundle is exported, then loaded and run in a fresh process (its
``run.py``), so the first inference is a cold one. ``runs`` runs follow the first, fewer when
``budget_s`` is spent (an untuned ResNet-18 takes seconds per run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from explorer.target import Target, parse_target
from explorer.temp_dirs import private_temp_dir
from explorer.workload import Workload, load_workload
from explorer.workload.reference import ort_session
from export.build import Progress
from export.busy_load import busy_processes
from export.choose import NO_RECORDS
from export.noise import Comparison, compare_rounds
from export.rows import BenchRow, latency_row, time_calls
from export.schedules import TaskSchedule

if TYPE_CHECKING:
    from export.flow import ExportReport

# Row names of `schedx bench --json` (scripts read them)
TUNED_ROW, DEFAULT_ROW, ORT_ROW = "tvm tuned", "tvm default", "onnxruntime"
BF16_ROW, INT8_ROW, ORT_INT8_ROW = "tvm default bf16", "tvm default int8", "onnxruntime int8"
PRECISION_ROWS = {"bf16": (BF16_ROW, "no records; convolutions and weight products in bf16, fp32 accumulation"),
                  "int8": (INT8_ROW, "no records; the int8 QDQ model's kernels (int8 products, int32 accumulation)")}


@dataclass
class BenchReport:
    """Rows side by side for one workload, and why a contender is missing."""

    workload: str
    threads: int
    rows: list[BenchRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    check: dict | None = None  # bench_bundle: the bundle's outputs against its saved reference
    comparisons: list[Comparison] = field(default_factory=list)  # pairs of rows, decided under the noise

    def table(self) -> str:
        """The rows as a fixed-width text table (ms)."""
        def ms(v):
            return "-" if v is None else f"{v * 1e3:.2f}"

        def ci(r):
            return "-" if r.ci_low_s is None else f"{r.ci_low_s * 1e3:.2f}-{r.ci_high_s * 1e3:.2f}"

        rounds = max((r.rounds for r in self.rows), default=1)
        lines = [f"{self.workload}, {self.threads} thread(s)" + (f", {rounds} alternated rounds" if rounds > 1 else ""),
                 f"{'':<42} {'compile s':>10} {'first ms':>10} {'median ms':>10} {'95% CI':>15} {'p90 ms':>10} "
                 f"{'runs':>5}"]
        for r in self.rows:
            compile_s = "-" if r.compile_s is None else f"{r.compile_s:.2f}"
            lines.append(f"{r.name[:42]:<42} {compile_s:>10} {ms(r.first_s):>10} {ms(r.median_s):>10} {ci(r):>15} "
                         f"{ms(r.p90_s):>10} {r.runs:>5}" + (f"  {r.remarks()}" if r.remarks() else ""))
        lines += [c.text() for c in self.comparisons]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"workload": self.workload, "threads": self.threads, "rows": [r.to_dict() for r in self.rows],
                "notes": list(self.notes), "check": self.check,
                "comparisons": [c.to_dict() for c in self.comparisons]}


def alternate_rounds(contenders: Mapping[str, Callable[[int, float], BenchRow]], *, rounds: int, runs: int,
                     budget_s: float, say: Progress | None = None
                     ) -> tuple[dict[str, BenchRow], dict[str, list[list[float]]]]:
    """The timing of :func:`alternate`: per contender, its first row (compile and first-run times)
    and its runs round by round, for a caller that pools rounds of several calls."""
    rounds = max(1, rounds)
    per_runs, per_budget = max(3, -(-runs // rounds)), budget_s / rounds
    names = list(contenders)
    firsts: dict[str, BenchRow] = {}
    by_round: dict[str, list[list[float]]] = {n: [] for n in names}
    for r in range(rounds):
        for i, name in enumerate(names if r % 2 == 0 else names[::-1]):
            if say:
                say(f"round {r + 1}/{rounds}: {name}", (r * len(names) + i) / (rounds * len(names)))
            row = contenders[name](per_runs, per_budget)
            firsts.setdefault(name, row)
            by_round[name].append(list(row.latencies))
    return firsts, by_round


def alternate(contenders: Mapping[str, Callable[[int, float], BenchRow]], *, rounds: int, runs: int,
              budget_s: float, say: Progress | None = None,
              pairs: Sequence[tuple[str, str]] | None = None) -> tuple[dict[str, BenchRow], list[Comparison]]:
    """Time every contender in ``rounds`` rounds, in turns, the order reversed every other round (no
    contender always runs first, or always after the same one; a slow minute of the machine falls
    on all), each round ``runs / rounds`` runs within ``budget_s / rounds`` seconds. A contender is
    a function ``(runs, budget_s) -> BenchRow``; its rows are pooled: one row per contender (the
    first round's compile and first-run times, every round's runs), and the comparisons of the
    ``pairs`` of contenders' keys (default: consecutive contenders), decided under the noise
    (:mod:`export.noise`)."""
    names = list(contenders)
    pairs = list(zip(names, names[1:])) if pairs is None else list(pairs)
    firsts, by_round = alternate_rounds(contenders, rounds=rounds, runs=runs, budget_s=budget_s, say=say)
    pooled = {n: [t for runs in by_round[n] for t in runs] for n in names}
    rows = {n: latency_row(firsts[n].name, firsts[n].compile_s, firsts[n].first_s, pooled[n], firsts[n].note,
                           by_round[n], firsts[n].error) for n in names}
    # rounds are fresh processes: compared round by round (export.noise.compare_rounds)
    comparisons = [compare_rounds(by_round[a], by_round[b], a_name=rows[a].name, b_name=rows[b].name)
                   for a, b in pairs if len(pooled[a]) >= 3 and len(pooled[b]) >= 3]
    return rows, comparisons


def bundle_row(folder: str | Path, name: str, *, threads: int, runs: int, budget_s: float,
               compile_s: float | None = None) -> tuple[BenchRow, dict]:
    """Time a bundle in a fresh process (its ``run.py``): the row, and the child's report (with
    its check against the saved reference)."""
    from export.bundle import read_manifest
    from export.verify import run_in_child

    manifest = read_manifest(folder)
    report = run_in_child(folder, threads=threads, runs=runs, budget_s=budget_s)
    latencies = report.get("latencies_s", [])
    note = f"load {report['load_s'] * 1e3:.0f} ms"
    row = latency_row(name, compile_s if compile_s is not None else manifest.get("compile_seconds"),
                      report["first_s"], latencies, note)
    return row, report


def ort_row(onnx_model, inputs: dict[str, np.ndarray], *, threads: int, runs: int, budget_s: float,
            name: str = ORT_ROW) -> BenchRow:
    import onnxruntime as ort

    start = time.perf_counter()
    session = ort_session(onnx_model, threads)
    created = time.perf_counter() - start
    first, latencies = time_calls(lambda: session.run(None, inputs), runs, budget_s)
    return latency_row(name, created, first, latencies,
                       f"ONNX Runtime {ort.__version__}, session creation as compile")


def torch_row(module, inputs: dict[str, np.ndarray], *, threads: int, runs: int, budget_s: float) -> BenchRow:
    import torch

    torch.set_num_threads(threads)
    args = [torch.from_numpy(a) for a in inputs.values()]
    module = module.train(False)  # inference mode

    def call():
        with torch.no_grad():
            return module(*args)

    first, latencies = time_calls(call, runs, budget_s)
    return latency_row(f"PyTorch {torch.__version__} eager", None, first, latencies, "eager: nothing to compile")


def _numpy_row(workload: Workload, inputs: dict[str, np.ndarray], *, runs: int, budget_s: float) -> BenchRow:
    arrays = [inputs[n] for n, _, _ in workload.inputs]
    first, latencies = time_calls(lambda: workload.kernel.reference(*arrays), runs, budget_s)
    return latency_row("numpy reference", None, first, latencies, "written for accuracy, not speed")


def _rebuilt_row_note(exported: ExportReport, records: str) -> str:
    """A bf16 row's own note (``records``: what it was built with) where its bundle was built again with every
    matmul in fp32 ("" where not)."""
    from export.flow import bf16_left

    if not exported.rebuilt:
        return ""
    return (f"{records}; every matmul in fp32 (with them in bf16 the build missed its tolerance), "
            f"{bf16_left(exported.built.precision.converted)}")


def _compile_s(report: ExportReport) -> float:
    return report.seconds["build"] + report.seconds["write"]


def _fallback_notes(by_row: Mapping[str, list[str]]) -> list[str]:
    """One note per kernel whose default rule fell back (:attr:`export.build.Built.fallbacks`), naming
    the rows (builds) where it did: ``tvm tuned, tvm default: kernel ...``."""
    rows: dict[str, list[str]] = {}
    for row, lines in by_row.items():
        for line in lines:
            rows.setdefault(line, []).append(row)
    return [f"{', '.join(names)}: {line}" for line, names in rows.items()]


def bundle_contender(folder: Path, name: str, *, threads: int, compile_s: float | None = None, note: str = ""):
    def run(runs: int, budget_s: float) -> BenchRow:
        row = bundle_row(folder, name, threads=threads, runs=runs, budget_s=budget_s, compile_s=compile_s)[0]
        return replace(row, note=f"{note}; {row.note}" if note else row.note)
    return run


def export_row(workload: Workload, target: Target, name: str, schedules, *, threads: int, runs: int,
               budget_s: float, note: str = "") -> tuple[BenchRow, tuple[str, ...]]:
    """Build ``workload`` with ``schedules`` and time it once (no rounds): the sweep's row per batch size,
    and the build's lines on kernels whose default rule fell back (:attr:`export.build.Built.fallbacks`)."""
    from export.flow import export_to_time

    with private_temp_dir("schedx-bench-") as tmp:
        report = export_to_time(workload, target, Path(tmp) / "bundle", schedules=schedules, threads=threads)
        row = bundle_contender(report.folder, name, threads=threads, compile_s=_compile_s(report), note=note)(
            runs, budget_s)
        return row, tuple(report.built.fallbacks)


def bench_workload(workload: str | Workload, *, schedules: Mapping[str, TaskSchedule] | None = None,
                   threads: int | None = None, runs: int = 50, budget_s: float = 20.0, shapes: str | None = None,
                   torch_module=None, progress: Progress | None = None, target: str | Target = "cpu",
                   no_schedules_why: str = NO_RECORDS, rounds: int = 3, precision: str = "fp32",
                   busy: int = 0, calibration=None, at_precision: Workload | None = None) -> BenchReport:
    """``tvm tuned`` (when ``schedules`` has any), ``tvm default``, ``onnxruntime``, PyTorch and OpenVINO
    (f32 and its default precision, :mod:`export.openvino_row`; a note where it is not installed),
    side by side (``no_schedules_why``: what to say when there are no schedules, see
    :func:`export.choose.why_no_schedules`).

    The builds are made first; then the contenders run in ``rounds`` alternated rounds (see
    :func:`alternate`), ``runs`` runs and ``budget_s`` seconds each in all, and consecutive rows are
    compared under the noise (tuned vs default, default vs ONNX Runtime, ...), and the build schedx
    ships (tuned, else default) against each OpenVINO row. ``precision="bf16"`` adds a row
    (:data:`BF16_ROW`, the default build at bf16, :mod:`explorer.precision`; verified, and built again
    with its matmuls in fp32 where it misses the tolerance, as ``schedx export`` ships it: a note says which) right after
    ``tvm default``, so the two are compared; ``"int8"`` adds :data:`INT8_ROW` (the model quantized
    with ``calibration`` and built as its QDQ model) there and :data:`ORT_INT8_ROW` (ONNX Runtime
    running that QDQ model) after ``onnxruntime``, the two int8 rows compared, the quantizer's
    figures against the float model in the notes; the other rows stay fp32. ``at_precision``: the
    workload as built at ``precision`` when the caller made it (:func:`export.build.as_built`).
    ``busy``: the timing runs beside that many busy processes that the benchmark starts and stops
    (:mod:`export.busy_load`), as on a machine where other work runs.

    ``target`` must run here (threads are set at run time with TVM_NUM_THREADS, so records keep
    matching the target's cores)."""
    from explorer.target.environment import cpu_info

    from explorer.measure.machine_load import machine_load

    say = progress or (lambda stage, frac: None)
    threads = int(threads or cpu_info()["usable_cores"])
    target = parse_target(target)
    target.require_runnable("benchmark")
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    meaning = None
    if precision == "fp32":
        at_precision = None
    else:  # made once; refused before anything is built (a CPU without bf16 instructions, a kernel)
        from export.build import as_built

        at_precision, meaning = as_built(at_precision or workload, target, precision, calibration)
    report = BenchReport(workload=workload.spec, threads=threads)
    if meaning is not None and meaning.quantization is not None:
        from explorer.models.int8_precision import summary

        report.notes.append(f"{INT8_ROW}: {summary(meaning.quantization)}")
    from export.flow import bf16_shipped_note, export_to_time

    load = machine_load()
    inputs = workload.sample_inputs()
    contenders: dict[str, Callable[[int, float], BenchRow]] = {}
    fallbacks: dict[str, list[str]] = {}  # each build row's kernels whose default rule fell back
    with private_temp_dir("schedx-bench-") as tmp:
        def build_row(row: str, folder: str, built: Workload, row_schedules, note: str, at: str = "fp32") -> None:
            exported = export_to_time(built, target, Path(tmp) / folder, schedules=row_schedules, threads=threads,
                                      precision=at)
            # (bf16: verified, the bundle export ships; the precision row is the build without records)
            shipped = bf16_shipped_note(exported, records=bool(row_schedules))
            if shipped:
                report.notes.append(f"{row}: {shipped}")
            note = _rebuilt_row_note(exported, f"{len(row_schedules)} records" if row_schedules else "no records") or note
            fallbacks[row] = exported.built.fallbacks
            contenders[row] = bundle_contender(exported.folder, row, threads=threads, compile_s=_compile_s(exported),
                                               note=note)

        if schedules:
            say("building TVM with records", 0.05)
            build_row(TUNED_ROW, "tuned", workload, schedules, f"{len(schedules)} records, defaults for the rest")
        else:
            report.notes.append(f"{TUNED_ROW}: {no_schedules_why}")
        say("building TVM without records", 0.25)
        build_row(DEFAULT_ROW, "default", workload, None, f"no records: {target.default_schedule}")
        if at_precision is not None:
            say(f"building TVM without records at {precision}", 0.3)
            row_name, row_note = PRECISION_ROWS[precision]
            build_row(row_name, precision, at_precision, None, row_note, precision)
        report.notes.extend(_fallback_notes(fallbacks))
        anchors: dict[str, Callable[[int, float], BenchRow]] = {}
        if workload.onnx_model is not None:
            from export.openvino_row import openvino_contenders

            contenders[ORT_ROW] = lambda n, b: ort_row(workload.onnx_model, inputs, threads=threads, runs=n, budget_s=b)
            if precision == "int8":  # the int8 model as ONNX Runtime runs it: what the int8 build is checked against
                contenders[ORT_INT8_ROW] = lambda n, b: ort_row(at_precision.onnx_model, inputs, threads=threads,
                                                                runs=n, budget_s=b, name=ORT_INT8_ROW)
            say("compiling the model with OpenVINO", 0.35)
            anchors, why_not = openvino_contenders(workload.onnx_model, inputs, threads=threads)
            report.notes.extend(why_not)
        elif workload.kind == "kernel" and workload.kernel.reference is not None:
            contenders["numpy reference"] = lambda n, b: _numpy_row(workload, inputs, runs=n, budget_s=b)
            report.notes.append("ONNX Runtime: not applicable to a kernel (numpy shown instead)")
        if torch_module is not None:
            try:
                import importlib

                importlib.import_module("torch")
                contenders["PyTorch eager"] = lambda n, b: torch_row(torch_module, inputs, threads=threads, runs=n,
                                                                     budget_s=b)
            except ImportError:
                report.notes.append("PyTorch: not installed")
        elif workload.kind == "model":
            report.notes.append("PyTorch: skipped, the model did not come from PyTorch (no torch module to run)")

        # consecutive rows compared (tuned vs default, default vs ONNX Runtime, ...), then the build
        # schedx ships (tuned, else default) against each OpenVINO row
        names = list(contenders)
        shipped = TUNED_ROW if TUNED_ROW in contenders else DEFAULT_ROW
        pairs = list(zip(names, names[1:])) + [(shipped, a) for a in anchors]
        if BF16_ROW in contenders:  # the bf16 build against each anchor too (OpenVINO's default is bf16 on some CPUs)
            pairs += [(BF16_ROW, a) for a in anchors]
        if INT8_ROW in contenders and ORT_INT8_ROW in contenders:  # int8 against int8
            pairs.append((INT8_ROW, ORT_INT8_ROW))
        contenders.update(anchors)

        def timing(stage: str, frac: float) -> None:
            say(stage, 0.4 + 0.6 * frac)
        with busy_processes(busy):  # --busy: the load is started here, so every contender runs beside it
            rows, report.comparisons = alternate(contenders, rounds=rounds, runs=runs, budget_s=budget_s,
                                                 say=timing, pairs=pairs)
        if busy:
            report.notes.append(f"timed beside {busy} busy process(es) started by the benchmark (--busy)")
    report.rows.extend(rows.values())
    load = load.worst(machine_load())
    if load.busy:
        report.notes.append(load.note())
    say("done", 1.0)
    return report


def bench_bundle(folder: str | Path, *, threads: int | None = None, runs: int = 50, budget_s: float = 20.0,
                 baselines: bool = True, rounds: int = 3) -> BenchReport:
    """Time a bundle (fresh process each round) and, when its workload can be rebuilt here, ONNX
    Runtime on the same inputs and threads, in alternated rounds (:func:`alternate`)."""
    from explorer.target.environment import cpu_info
    from export.bundle import read_manifest
    from export.errors import ExportError

    folder = Path(folder).expanduser().resolve()
    manifest = read_manifest(folder)
    threads = int(threads or cpu_info()["usable_cores"])
    spec = manifest["workload"]["spec"]
    report = BenchReport(workload=f"{spec} ({manifest['target']['label']})", threads=threads)
    target = bundle_target(manifest)
    why = target.why_not_here()
    if why:
        raise ExportError(f"this bundle was built for {target.label} and cannot run here: {why}; run it "
                          f"{target.run_elsewhere}")
    tuned = sum(1 for t in manifest["tasks"] if t["schedule"] == "record")
    name = f"TVM bundle ({tuned}/{len(manifest['tasks'])} tasks from records)"
    checks: list[dict | None] = []

    def bundle(n: int, b: float) -> BenchRow:
        row, child = bundle_row(folder, name, threads=threads, runs=n, budget_s=b)
        checks.append(child.get("check"))
        return row
    contenders: dict[str, Callable[[int, float], BenchRow]] = {name: bundle}
    ort = _bundle_baseline(folder, manifest, threads) if baselines else None
    if isinstance(ort, str):
        report.notes.append(ort)
    elif ort is not None:
        contenders[ORT_ROW] = ort
        report.notes.append("PyTorch: skipped, the model did not come from PyTorch")
    rows, report.comparisons = alternate(contenders, rounds=rounds, runs=runs, budget_s=budget_s)
    report.rows.extend(rows.values())
    report.check = checks[0] if checks else None
    if report.check:
        c = report.check
        report.notes.insert(0, f"outputs {'match' if c['verified'] else 'DIFFER FROM'} {c['reference']} (saved at "
                               f"export): max abs error {c['max_abs_error']:.2e}, normalised {c['max_rel_error']:.2e}")
    return report


def _bundle_baseline(folder: Path, manifest: dict, threads: int):
    """ONNX Runtime on the bundle's saved inputs as a contender, or why there is none (a sentence)."""
    from explorer.errors import ExplorerError

    spec = manifest["workload"]["spec"]
    if manifest["workload"]["kind"] != "model":
        return "ONNX Runtime: not applicable to a kernel"
    try:
        workload = load_workload(spec, manifest["workload"].get("shapes"))
    except ExplorerError as err:
        return f"ONNX Runtime: cannot rebuild {spec} here ({err})"
    if workload.onnx_model is None:
        return "ONNX Runtime: the model did not come from ONNX"
    with np.load(folder / "inputs.npz") as data:
        inputs = {n: data[n] for n, _, _ in workload.inputs}
    return lambda n, b: ort_row(workload.onnx_model, inputs, threads=threads, runs=n, budget_s=b)


def bundle_target(manifest: dict) -> Target:
    """The target a bundle was built for, from its manifest (its config, not the spelling: ``cpu``
    meant the exporting machine)."""
    import json

    t = manifest["target"]
    config = dict(t["config"])
    return parse_target(json.dumps(config))


__all__ = [
    "BF16_ROW",
    "DEFAULT_ROW",
    "INT8_ROW",
    "ORT_INT8_ROW",
    "PRECISION_ROWS",
    "ORT_ROW",
    "TUNED_ROW",
    "BenchReport",
    "BenchRow",
    "bench_bundle",
    "bench_workload",
    "bundle_row",
    "bundle_target",
    "export_row",
    "ort_row",
    "time_calls",
    "torch_row",
]
