"""Benchmark: whole models against ONNX Runtime, with default schedules only and after a search.

Per model (the zoo's ResNet-18, MobileNetV2 and BERT layer by default), in one run:
  - ``tvm default``: exported with no records (every kernel on the default CPU schedule);
  - ``tvm tuned``: after ``--minutes`` of search on the model's tasks (``search.tune.tune`` with
    its time budget, into a throw-away database), as an export applies it: per task the first of
    the search's confirmation round (its best schedules and its default timed again in turns),
    then only the records whose kernel beats the default inside the model (``export.in_model``,
    as ``schedx export --check-in-model``; ``--no-check-in-model``: every confirmed record);
  - ``tvm default bf16`` with ``--precision bf16``: the default build at bf16 as ``schedx export
    --precision bf16 --no-db`` ships it (``export.build.as_built`` and ``export_workload(precision=...)``,
    verified: where it misses the bf16 tolerance, built again with every matmul in fp32, as ``schedx bench
    --precision bf16`` times it too), beside the fp32 rows, compared with ``tvm
    default`` and each OpenVINO row;
  - ONNX Runtime at 1 and 2 threads; the ratios against both;
  - OpenVINO at ``--threads`` (``export.openvino_row``): its f32 and its default precision (bf16 on
    a CPU with AMX or AVX512-BF16), each TVM row against both under the noise, and each one's
    outputs against ONNX Runtime (fp32 unless the model is quantized) by schedx's own rule for the
    model (the error of max|ref|, within or over the bound schedx holds a build at that precision
    to, and why: printed after the row's median, JSON ``output_error``); where OpenVINO is
    not installed, a one-line note instead;
  - the per-kernel top 5 (time per fused kernel from the Relax VM profiler, ``export.profile``) of
    the build shipped (tuned; with no search, the default at ``--precision``);
and at the end matmul 1024 fp32: the default schedule and the searched one against numpy with the
OpenBLAS pins lifted (the default and numpy alternated ``--rounds`` times, the best run of each, as
numpy's own figure is a best of 10). TVM runs as deployed (bundle in a fresh process), at ``--threads`` threads
(``TVM_NUM_THREADS`` is set for every TVM of the run, the search's workers included).

Every contender is timed in ``--rounds`` alternated rounds (``export.bench.alternate``, as
``schedx bench``: the order reversed every other round, the machine is shared); each figure is the
median of all its runs with a 95% confidence interval, and tuned against the default (and the
default against ONNX Runtime) is decided under the noise: faster, slower, or no difference beyond
it (``export.noise``). The machine (vector width, AVX-512 lines in /proc/cpuinfo, cores) and its
calibrated peak (the FMA peak kernel and numpy's sgemm, copy bandwidth) head the output.
Run: ``python -m benchmarks.bench_models --minutes M [--models a,b]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

MODELS = ("resnet18", "mobilenet_v2", "bert_encoder")


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def machine() -> dict:
    from explorer.target.environment import cpu_info
    from explorer.target import host_target

    avx512_lines = subprocess.run(["grep", "-c", "avx512", "/proc/cpuinfo"], capture_output=True, text=True,
                                  check=False).stdout
    info = cpu_info()
    target = host_target()
    return {"cpu": info["model"], "usable_cores": info["usable_cores"], "avx512_lines": int(avx512_lines or 0),
            "target": target.label, "vector_width": target.vector_width}


def search(tasks, minutes: float, db: Path, name: str, target="cpu"):
    """``minutes`` of search on ``tasks`` for ``target`` into the database at ``db``; the summary."""
    from search.job_spec import ValidJob
    from search.params import SearchParams
    from search.tune import tune
    from store import Store

    with Store(db) as store:
        return tune(ValidJob.of_tasks(tasks, target, source=name), store,
                    SearchParams(trials=1_000_000, minutes=minutes))


def tuned_schedules(tasks, db: Path, target) -> dict:
    """Per task, what an export applies after the search: the first of its confirmation round (the
    best schedules and the default timed again in turns); tasks where the default won are left out
    (they keep the default schedule)."""
    from export.choose import best_schedules

    return best_schedules(db, tasks, target)[0]  # (a default's record already means the default schedule)


def bundle(workload, target, folder: Path, schedules, precision: str = "fp32") -> Path:
    from export.flow import export_workload

    return export_workload(workload, target, folder, schedules=schedules, verify=True, layers=False,
                           precision=precision).folder


def precision_bundle(workload, target, folder: Path, precision: str) -> tuple[str, Path] | None:
    """The row name (:data:`export.bench.PRECISION_ROWS`) and the default build at ``precision`` as
    ``schedx export --precision`` ships it (verified at its own tolerance; a bf16 build that misses it
    built again with every matmul in fp32, as ``schedx bench`` times it too); None at fp32."""
    if precision == "fp32":
        return None
    from export.bench import PRECISION_ROWS
    from export.build import as_built

    at_precision, _ = as_built(workload, target, precision)
    return PRECISION_ROWS[precision][0], bundle(at_precision, target, folder, None, precision)


def bench_model(model: str, opts, target, tmp: Path, versus=None) -> dict:
    from explorer.measure.cache_peak import cache_peak
    from explorer.measure.calibration import calibration
    from explorer.workload import load_workload
    from export.bench import alternate, bundle_row, ort_row
    from export.openvino_row import openvino_contenders
    from export.profile import profile_workload
    from export.profile_text import headroom_line, roofline_peaks_text, tiers_text

    workload = load_workload(model)
    tasks = workload.tasks()
    inputs = workload.sample_inputs()
    result: dict = {"model": model, "tasks": len(tasks), "precision": opts.precision}
    start = time.perf_counter()
    default_dir = bundle(workload, target, tmp / f"{model}-default", None)
    result["default_export_s"] = round(time.perf_counter() - start, 1)
    versus_dir = bundle(workload, versus, tmp / f"{model}-versus", None) if versus is not None else None
    start = time.perf_counter()
    at_precision = precision_bundle(workload, target, tmp / f"{model}-{opts.precision}", opts.precision)
    if at_precision is not None:
        result["precision_export_s"] = round(time.perf_counter() - start, 1)
    schedules, dropped = {}, 0
    if opts.minutes > 0:
        db = tmp / f"{model}.db"
        summary = search(tasks, opts.minutes, db, model, target)
        schedules = tuned_schedules(tasks, db, target)
        confirmed_tasks = {c["task"] for c in summary.confirmed}
        after_confirmation = {"records": len(schedules),
                              "confirmed_records": sum(c["after_source"] == "search" for c in summary.confirmed),
                              "unconfirmed_records": sorted(set(schedules) - confirmed_tasks)}
        in_model = None
        if opts.check_in_model:  # as `schedx export --check-in-model`: a record ships only where it wins in place
            from export.in_model import check_in_model

            start = time.perf_counter()
            schedules, check = check_in_model(workload, target, schedules, threads=opts.threads)
            in_model = {"kept": len(check.kept), "dropped": len(check.dropped),
                        "unchecked": sum(t["verdict"] == "unchecked" for t in check.tasks.values()),
                        "seconds": round(time.perf_counter() - start, 1), "tasks": check.tasks, "whole": check.whole}
        result["search"] = {"minutes": opts.minutes, "trials": summary.trials, "seconds": round(summary.seconds, 1),
                            "records_used": len(schedules), "tasks_on_default": len(tasks) - len(schedules),
                            "in_model": in_model,
                            "confirmed": len(summary.confirmed),
                            "overturned": sum(c["overturned"] for c in summary.confirmed),
                            "confirm_s": round(summary.confirm_s, 1),
                            "confirmations": summary.confirmed, "unconfirmed": summary.unconfirmed,
                            "after_confirmation": after_confirmation}
    tuned_dir = bundle(workload, target, tmp / f"{model}-tuned", schedules) if schedules else None

    def tvm(folder: Path, name: str):
        return lambda runs, budget_s: bundle_row(folder, name, threads=opts.threads, runs=runs, budget_s=budget_s)[0]

    def ort(threads: int):
        name = f"onnxruntime {threads} thread" + ("s" if threads > 1 else "")
        return lambda runs, budget_s: replace(ort_row(workload.onnx_model, inputs, threads=threads, runs=runs,
                                                      budget_s=budget_s), name=name)

    # side by side in the order the comparisons read: tuned against the default, the default against
    # the --versus build or ONNX Runtime
    contenders = {"tvm tuned": tvm(tuned_dir, "tvm tuned")} if tuned_dir is not None else {}
    contenders["tvm default"] = tvm(default_dir, "tvm default")
    if at_precision is not None:  # right after the fp32 default, so the two are compared
        contenders[at_precision[0]] = tvm(at_precision[1], at_precision[0])
    if versus_dir is not None:  # the same tree's defaults for another target of this machine (--versus)
        contenders[versus_row(versus)] = tvm(versus_dir, versus_row(versus))
    contenders.update({"onnxruntime 2 threads": ort(2), "onnxruntime 1 thread": ort(1)})
    # OpenVINO f32 and its default precision (bf16 where the CPU has AMX or AVX512-BF16), at TVM's threads
    anchors, result["notes"] = openvino_contenders(workload.onnx_model, inputs, threads=opts.threads)
    pairs = [*zip(contenders, list(contenders)[1:]), ("tvm default", "onnxruntime 1 thread"),
             *((n, a) for n in contenders if n.startswith("tvm") for a in anchors)]
    rows, comparisons = alternate({**contenders, **anchors}, rounds=opts.rounds, runs=opts.runs * opts.rounds,
                                  budget_s=opts.budget * opts.rounds, pairs=pairs)
    rows = {(r.name if n in anchors else n): r for n, r in rows.items()}  # "openvino default (bf16)"
    if opts.minutes > 0 and tuned_dir is None:  # no record beat its default: tuned is the default build
        rows["tvm tuned"] = rows["tvm default"]
    result["median_ms"] = {n: round(r.median_s * 1e3, 3) for n, r in rows.items()}
    result["ci_ms"] = {n: [round(r.ci_low_s * 1e3, 3), round(r.ci_high_s * 1e3, 3)] for n, r in rows.items()
                       if r.ci_low_s is not None}
    result["comparisons"] = [c.to_dict() | {"text": c.text()} for c in comparisons]
    # OpenVINO's outputs against ONNX Runtime fp32, by schedx's verification rule (export.openvino_row)
    result["output_error"] = {n: r.error.to_dict() | {"text": r.error.text()} for n, r in rows.items() if r.error}
    ort1, ort2 = rows["onnxruntime 1 thread"].median_s, rows["onnxruntime 2 threads"].median_s
    result["ratios"] = {f"{n} / ort {k}": round(r.median_s / o, 2) for n, r in rows.items() if n.startswith("tvm")
                        for k, o in (("1t", ort1), ("2t", ort2))}
    openvino = [r for n, r in rows.items() if n.startswith("openvino")]
    result["ratios"].update({f"{n} / {o.name}": round(r.median_s / o.median_s, 2) for n, r in rows.items()
                             if n.startswith("tvm") for o in openvino})
    if at_precision is not None:
        result["ratios"][f"{at_precision[0]} / tvm default"] = round(
            rows[at_precision[0]].median_s / rows["tvm default"].median_s, 2)
    if versus_dir is not None:
        result["ratios"][f"tvm default / {versus_row(versus)}"] = round(
            rows["tvm default"].median_s / rows[versus_row(versus)].median_s, 2)
    peaks = calibration()
    caches = cache_peak()  # the roofline of kernels whose bytes fit in the L2 caches or the L3
    prof = profile_workload(workload, target, schedules=schedules or None, runs=5, threads=opts.threads, ort=False,
                            peak_gflops=peaks.peak_gflops, memory=caches.memory_roof(peaks.peak_gbps),
                            family_peaks=peaks.families,
                            precision=opts.precision if not schedules else "fp32")  # --precision: its default build
    result["peak_notes"] = [n for n in prof.notes if "above the" in n and "peak" in n]
    result["peaks"] = prof.peaks_text()  # each kernel reads against its instruction family's peak
    # what a search could still take off the model built as shipped (tuned, or the defaults)
    # against each kernel's family's peak (a bf16 run's kernels against the bf16 units'), as `schedx profile` reads them
    line = headroom_line(prof, "headroom left in the model as shipped", "about the most more search could gain")
    result["headroom"] = {"ms": round(prof.headroom_s * 1e3, 3), "share": round(prof.headroom_s / prof.kernels_s, 3),
                          "peak_gflops": round(prof.roofline_peak_gflops, 1), "peaks": roofline_peaks_text(prof),
                          "tiers": tiers_text(prof), "text": line} if line else None
    result["roof_notes"] = list(prof.roof_notes)  # a kernel above its roofline: measured again, raised, or blank
    result["profiled"] = "tvm tuned" if schedules else ("tvm default" if opts.precision == "fp32"
                                                        else at_precision[0])
    result["top5"] = [{"task": k.task.split("/")[-1], "ms": round(k.seconds * 1e3, 3), "share": round(k.share, 3),
                       "gflops": round(k.gflops, 1) if k.gflops else None, "schedule": k.schedule, "family": k.family,
                       "product_share": round(k.product_share, 2)}  # under 0.9: its % peak reads its products
                      for k in prof.top(5)]
    return result


def versus_row(versus) -> str:
    """The row name of the defaults built for the ``--versus`` target."""
    return f"tvm default {versus.spec}"


def bench_matmul(opts, target, tmp: Path) -> dict:
    from explorer.kernels import load_kernel
    from explorer.measure import measure
    from explorer.measure.calibration import numpy_matmul_gflops
    from explorer.schedule.defaults import default_schedule
    from explorer.workload import load_workload
    from export.choose import best_schedules

    spec = "matmul:M=1024,N=1024,K=1024"
    kernel = load_kernel(spec)
    cpu = target.cpu_spec()
    import tvm

    scheduled = default_schedule(kernel.func, cpu)[0].with_attr("global_symbol", "main")
    # in alternation, the best run of each, as numpy's figure is (its speed moves by 1.5x between runs here)
    numpy_best, best_s, verified = 0.0, None, None
    for _ in range(opts.rounds):
        numpy_best = max(numpy_best, numpy_matmul_gflops(1024, 10, native=True))
        run = measure(kernel, tvm.IRModule({"main": scheduled}), repeat=10)
        verified = run.verified if verified is None else verified and run.verified
        best_s = min(filter(None, (best_s, *run.latencies)), default=None)
    default_gflops = kernel.info.flops / best_s / 1e9 if best_s else 0.0
    result = {"numpy_gflops": round(numpy_best, 1), "default_gflops": round(default_gflops, 1),
              "default_verified": verified, "rounds": opts.rounds, "timing": "best run of each, rounds alternated"}
    if opts.minutes > 0:
        tasks = load_workload(spec).tasks()
        db = tmp / "matmul.db"
        summary = search(tasks, opts.minutes, db, spec)
        best = best_schedules(db, tasks, target)[0]
        record = next(iter(best.values()), None)
        result["tuned_gflops"] = round(kernel.info.flops / record.median_s / 1e9, 1) if record and record.median_s else None
        result["trials"] = summary.trials
    return result


def show_model(r: dict) -> None:
    out(f"\n{r['model']}: {r['tasks']} kernels; default export + verify {r['default_export_s']} s"
        + (f", at {r['precision']} {r['precision_export_s']} s" if "precision_export_s" in r else ""))
    if "search" in r:
        s = r["search"]
        out(f"  search: {s['minutes']} min, {s['trials']} trials in {s['seconds']} s; confirmation round "
            f"({s['confirm_s']} s): {s['confirmed']} tasks' best timed again in turns with the default, the "
            f"search's first lost for {s['overturned']}; {s['records_used']} records used, {s['tasks_on_default']} "
            f"tasks on the default schedule")
        if s.get("after_confirmation"):
            a = s["after_confirmation"]
            out(f"  after the confirmation round: {a['records']} tasks on a record ({a['confirmed_records']} confirmed "
                f"against the default; not reached by the round: {', '.join(a['unconfirmed_records']) or 'none'})")
        from app.cli_search import gain_lines

        for line in gain_lines(s.get("confirmations") or [], top=8):
            out("  " + line)
        if s.get("in_model"):
            m = s["in_model"]
            out(f"  checked inside the model ({m['seconds']} s): {m['kept']} records kept, {m['dropped']} dropped (not "
                f"faster than the default there by 2% in the median round, or not applicable)")
            kept = [t for t in m["tasks"].values() if t["kept"] and t.get("default_s") and t.get("record_s")]
            if kept:
                saved = sum(t["default_s"] - t["record_s"] for t in kept)
                out(f"  in place, the kept records' kernels: {saved * 1e3:.3f} ms per run less than the defaults' "
                    f"(their best rounds; the estimate from cold timings above)")
            w = m.get("whole") or {}
            if w:
                out(f"  the {w['records']} records together, the whole model against the defaults in "
                    f"{w.get('rounds', '?')} alternated rounds: {w['verdict']} "
                    f"(ratio {w['ratio']:.3f}, 95% CI {w['low']:.3f}-{w['high']:.3f}): "
                    + ("kept" if w["verdict"] == "faster" else "none shipped"))
    for name, ms in r["median_ms"].items():
        low, high = r["ci_ms"].get(name, (None, None))
        ci = f"  (95% CI {low:.2f}-{high:.2f})" if low is not None else ""
        error = (r.get("output_error") or {}).get(name)
        out(f"  {name:<26} {ms:9.2f} ms{ci}" + (f"  {error['text']}" if error else ""))
    for c in r["comparisons"]:
        out(f"  {c['text']}")
    for note in r.get("notes") or []:
        out(f"  note: {note}")
    for name, ratio in r["ratios"].items():
        out(f"  {name:<44} {ratio:9.2f}x")
    h = r.get("headroom")
    if h:
        out(f"  {h.get('text') or 'headroom left in the model as shipped: %.3f ms' % h['ms']}")  # older results: no text
    for k in r.get("above_roofline") or []:  # older results: a roofline a kernel ran above
        out(f"  above its roofline: {k['task']} at {k['percent']:.0f}% (bytes in {k['tier']})")
    for note in r.get("roof_notes") or []:
        out(f"  {note}")
    if r.get("peaks"):
        out(f"  {r['peaks']}")
    for note in r.get("peak_notes") or []:
        out(f"  {note}")
    out(f"  top 5 kernels of {r.get('profiled', 'the build')} (VM profiler):")
    for k in r["top5"]:
        gf = f"{k['gflops']:7.1f} GFLOPS" if k["gflops"] else " " * 14
        out(f"    {k['task'][:48]:<48} {k['ms']:8.3f} ms {k['share']:6.1%} {gf} {k['schedule']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=0.0, help="search minutes per model (0: defaults only)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=2, help="TVM's and OpenVINO's threads (ONNX Runtime runs at 1 and 2)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per contender and round")
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of timing per contender and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds, their runs pooled")
    parser.add_argument("--no-matmul", action="store_true", help="skip matmul 1024 against numpy")
    parser.add_argument("--no-check-in-model", dest="check_in_model", action="store_false",
                        help="ship every confirmed record (default: only those faster than the default inside the "
                             "model, as `schedx export --check-in-model`)")
    parser.add_argument("--target", default="cpu", help="the target TVM builds for (default: this machine)")
    parser.add_argument("--versus", default=None,
                        help="also time the defaults built for this target of the same machine, in the same rounds "
                             "(cpu:-avx512f: AVX2 code on an AVX-512 host)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="also time the default build at this precision (bf16: weight products and "
                             "convolutions in bf16), beside the fp32 rows")
    parser.add_argument("--json", dest="json_path", default=None, help="also write the figures to this JSON file")
    opts = parser.parse_args()
    # TVM's default is half the hardware threads (it assumes hyper-threading): one thread on a
    # 2-core VM. Every TVM here and in the children (search workers, bundles) runs at --threads.
    os.environ["TVM_NUM_THREADS"] = str(opts.threads)

    from explorer.target import parse_target

    target = parse_target(opts.target)
    target.require_runnable("benchmark")
    from explorer.precision import refusal

    why = refusal(opts.precision, target)  # refused before anything is built (a CPU without bf16 instructions)
    if why:
        parser.exit(2, f"bench_models: {why}\n")
    versus = parse_target(opts.versus) if opts.versus else None
    if versus is not None:
        versus.require_runnable("benchmark")
    report = {"command": " ".join(["python -m benchmarks.bench_models", *sys.argv[1:]]), "machine": machine(),
              "models": [], "matmul": None}
    m = report["machine"]
    out(f"machine: {m['cpu']}, {m['usable_cores']} usable cores, avx512 lines in /proc/cpuinfo: {m['avx512_lines']}, "
        f"target {m['target']}, vector width {m['vector_width']} bits")
    from explorer.measure.calibration import calibration

    peaks = calibration()
    report["peak"] = peaks.to_dict()
    out(f"{peaks.summary()}, machine {m['cpu']}, {m['usable_cores']} cores")
    out(f"TVM builds for {target.label} ({target.vector_width}-bit vectors)"
        + (f"; versus {versus.label} ({versus.vector_width}-bit vectors)" if versus is not None else ""))
    with tempfile.TemporaryDirectory(prefix="schedx-bench-models-") as tmp:
        for model in [x for x in opts.models.split(",") if x]:
            r = bench_model(model, opts, target, Path(tmp), versus)
            report["models"].append(r)
            show_model(r)
        if not opts.no_matmul:
            r = bench_matmul(opts, target, Path(tmp))
            report["matmul"] = r
            tuned = f", after search {r['tuned_gflops']} GFLOPS ({r['tuned_gflops'] / r['numpy_gflops']:.2f}x numpy)" \
                if r.get("tuned_gflops") else ""
            out(f"\nmatmul 1024 fp32: numpy (no OpenBLAS pins) {r['numpy_gflops']} GFLOPS, default schedule "
                f"{r['default_gflops']} GFLOPS ({r['default_gflops'] / r['numpy_gflops']:.2f}x numpy){tuned}")
    final = calibration()
    if final != peaks:  # measured again or raised by a kernel during the run
        report["peak_after"] = final.to_dict()
        out(f"\n{final.summary()} (after this run)")
    if opts.json_path:
        Path(opts.json_path).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
