"""Benchmark: the corpus of real architectures (``benchmarks/corpus``) with no search.

Per model, in a child process of its own (a native crash or a hang fails one row):
  - imports: the ONNX file loads into Relax (with the manifest's ``--shapes`` for dynamic models);
  - verified: exported for this machine's CPU with default schedules at ``--precision`` (fp32, bf16
    or int8: the library calls of `schedx export --precision`), run as deployed (the bundle's
    ``run.py`` in a fresh process) and compared with ONNX Runtime; the row states the largest
    normalised error against the tolerance every output was held to (bf16's own, int8's
    quantization steps); a model the precision refuses (int8 of a model already quantized, ...)
    says why in its row; bf16 on a CPU without AVX512-BF16 or AMX-BF16 is refused up front;
  - latency: the bundle at 1 and 2 threads against ONNX Runtime at 1 and 2 threads, the four
    alternated ``--rounds`` times (order reversed every other round: ``export.bench.alternate``, as
    ``schedx bench`` does), the median of each one's runs pooled over the rounds;
  - OpenVINO at 2 threads in the same rounds (``export.openvino_row``): its f32 and its default
    precision (bf16 on a CPU with AMX or AVX512-BF16), tvm 2t's ratio against each (columns
    ``/ovf32`` and ``/ovdef``; the 95% intervals in the JSON's ``ratio_ci``), and each one's
    outputs against ONNX Runtime (fp32 unless the model is quantized) by schedx's own rule for the
    model (a line under the row, JSON ``openvino_error``: the error of max|ref|, within or over the
    bound schedx holds a build at that precision to, and why); a note where OpenVINO is not installed;
  - at bf16 or int8: the same model built in fp32 at 2 and 1 threads in the same rounds, tvm's
    ratio against it at the same threads (columns ``/fp32`` and ``1t``: what the precision buys);
  - its slowest kernel: ms, share of the kernels' time, GFLOPS and % of the measured peak (fp32
    matmul through numpy's BLAS, `schedx calibrate`);
  - with ``--cross``: the CUDA (``cuda:sm_80``) and aarch64 builds and their checks (compile only);
  - with ``--busy N``: the timing runs beside N busy processes (``while True: pass``), as on a
    loaded machine (the export and the profile run before and after them).
A summary line ends the table: verified k/N, the median and worst ratio against ONNX Runtime at
2 threads and against OpenVINO f32 and default (and OpenVINO's worst error by schedx's rule), and
the kernels over 20% of a model's time that run below 10% of the peak.

Run: ``python -m benchmarks.corpus.build`` once (it exports the files), then
``python -m benchmarks.bench_corpus [--only a,b] [--precision bf16] [--cross] [--json out.json] [--markdown]``
(``--manifest FILE --dir DIR``: models of your own).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_models import machine, out
from benchmarks.corpus.build import SETS, corpus_dir, manifest_path
from explorer.precision import PRECISIONS

CROSS_TARGETS = ("cuda:sm_80", "aarch64")
FP32_ROWS = {2: "tvm fp32 2t", 1: "tvm fp32 1t"}  # at --precision bf16 or int8: the model built in fp32, beside it


def entry_shapes(entry: dict) -> str | None:
    """A corpus entry's input shapes as a ``--shapes`` string (None: the model's own)."""
    shapes = entry.get("shapes")
    if isinstance(shapes, str) or shapes is None:  # the exporter set keeps the --shapes string itself
        return shapes or None
    return ",".join(f"{k}:{v}" for k, v in shapes.items()) or None


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _base(entry: dict) -> dict:
    base = {"name": entry["name"], "family": entry["family"], "source": entry["source"]}
    return {**base, "exporter": entry["exporter"]} if entry.get("exporter") else base


def verification_fields(report) -> dict:
    """What a row states of its verification: the largest normalised error against the tolerance it
    was held to (per output: the precision's own for bf16, quantization steps for int8), and what the
    precision converted and kept in fp32 (``matmuls_fp32``: the bf16 export's second build, every matmul
    in fp32)."""
    v = report.verification
    fields: dict = {}
    if v is not None and v.max_rel_error is not None:
        fields.update(verify_error=v.max_rel_error, tolerance=v.tolerance)
        steps = [a for a in v.output_atol if a]
        if steps:  # int8: each output within a few quantization steps, absolute
            fields.update(verify_error=v.max_abs_error, tolerance=max(steps), tolerance_kind="absolute")
    precision = report.built.precision
    if precision is not None and precision.name == "bf16":
        fields["converted"] = precision.converted
        if precision.matmuls_fp32:  # the bf16 build missed the tolerance: built again with every matmul in fp32
            fields["matmuls_fp32"] = True
        if not precision.converted:
            fields["precision_note"] = "no product with constant weights to compute in bf16: runs in fp32"
    return fields


def bench_one(entry: dict, folder: Path, opts) -> dict:
    """Import, export, verify, time and profile one corpus model (runs in the child)."""
    from explorer.measure.cache_peak import cache_peak
    from explorer.measure.calibration import calibration
    from explorer.target import host_target
    from explorer.workload import load_workload
    from export.bench import alternate, bundle_row, ort_row
    from export.build import as_built
    from export.errors import ExportError
    from export.flow import export_workload
    from export.openvino_row import OV_DEFAULT_ROW, OV_F32_ROW, openvino_contenders
    from export.profile import profile_export

    result: dict = _base(entry)
    path = folder / entry["file"]
    start = time.perf_counter()
    try:
        workload = load_workload(str(path), entry_shapes(entry))
        result["tasks"] = len(workload.tasks())
    except Exception as exc:  # noqa: BLE001 - the row says why
        result.update(imports=False, error=_error(exc))
        return result
    result.update(imports=True, import_s=round(time.perf_counter() - start, 1))
    target = host_target()
    result["precision"] = opts.precision
    try:  # the model as `schedx export --precision` builds it; a refusal is the row's reason, not an error
        built, _ = as_built(workload, target, opts.precision)
    except ExportError as exc:
        result.update(exported=False, verified=False, refused=str(exc)[:300])
        return result
    with tempfile.TemporaryDirectory(prefix="schedx-corpus-") as tmp:
        start = time.perf_counter()
        try:
            report = export_workload(built, target, Path(tmp) / "cpu", verify=True, layers=False,
                                     threads=opts.threads, precision=opts.precision)
        except Exception as exc:  # noqa: BLE001
            result.update(exported=False, verified=False, error=_error(exc))
            return result
        result.update(exported=True, export_s=round(time.perf_counter() - start, 1), verified=report.verified,
                      verdict=report.verdict, **verification_fields(report))
        inputs = workload.sample_inputs()
        contenders = {f"tvm {t}t": (lambda n, b, t=t: bundle_row(report.folder, f"tvm {t}t", threads=t, runs=n,
                                                                  budget_s=b)[0]) for t in (1, 2)}
        pairs = [("tvm 2t", "ort 2t"), ("tvm 1t", "ort 1t")]
        if opts.precision != "fp32":  # the same model built in fp32, timed beside it: what the precision buys
            try:
                fp32 = export_workload(workload, target, Path(tmp) / "fp32", verify=False, layers=False)
                for t, name in FP32_ROWS.items():
                    contenders[name] = (lambda n, b, t=t, name=name: bundle_row(fp32.folder, name, threads=t, runs=n,
                                                                               budget_s=b)[0])
                    pairs.append((f"tvm {t}t", name))
            except Exception as exc:  # noqa: BLE001
                result["fp32_error"] = _error(exc)
        contenders.update({f"ort {t}t": (lambda n, b, t=t: replace(ort_row(workload.onnx_model, inputs, threads=t,
                                                                          runs=n, budget_s=b), name=f"ort {t}t"))
                           for t in (1, 2)})
        # OpenVINO at 2 threads: f32 and its default precision (bf16 on AMX / AVX512-BF16), or a note why not
        anchors, notes = openvino_contenders(workload.onnx_model, inputs, threads=2)
        if notes:
            result["openvino_note"] = notes[0]
        pairs += [("tvm 2t", a) for a in anchors]
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(opts.busy)]
        try:
            rows, comparisons = alternate({**contenders, **anchors}, rounds=opts.rounds,
                                          runs=opts.runs * opts.rounds, budget_s=opts.budget * opts.rounds,
                                          pairs=pairs)
            result["ms"] = {n: round(r.median_s * 1e3, 3) for n, r in rows.items()}
            result["ratio_1t"] = round(rows["tvm 1t"].median_s / rows["ort 1t"].median_s, 2)
            result["ratio_2t"] = round(rows["tvm 2t"].median_s / rows["ort 2t"].median_s, 2)
            for t, name in FP32_ROWS.items():  # ratio_fp32 (2 threads) and ratio_fp32_1t
                if name in rows:
                    key = "ratio_fp32" + ("_1t" if t == 1 else "")
                    result[key] = round(rows[f"tvm {t}t"].median_s / rows[name].median_s, 2)
            # every ratio with its 95% interval (export.noise.compare_rounds), keyed "tvm 2t / ort 2t"
            key = {r.name: n for n, r in rows.items()}  # (row names are unique: "ort 2t", "openvino default (bf16)")
            result["ratio_ci"] = {f"{key[c.a]} / {key[c.b]}": [round(c.low, 3), round(c.high, 3)]
                                  for c in comparisons}
            if anchors:
                result["ratio_ov_f32"] = round(rows["tvm 2t"].median_s / rows[OV_F32_ROW].median_s, 2)
                result["ratio_ov_default"] = round(rows["tvm 2t"].median_s / rows[OV_DEFAULT_ROW].median_s, 2)
                result["openvino_default"] = rows[OV_DEFAULT_ROW].name  # "openvino default (bf16)"
                # each row's outputs against ONNX Runtime, by schedx's verification rule for the model
                result["openvino_error"] = {rows[a].name: rows[a].error.to_dict() | {"text": rows[a].error.text()}
                                            for a in anchors if rows[a].error}
        except Exception as exc:  # noqa: BLE001
            result["timing_error"] = _error(exc)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
        try:
            peaks = calibration()
            caches = cache_peak()  # the roofline of kernels whose bytes fit in the L2 caches or the L3
            prof = profile_export(report, workload, runs=5, threads=2, ort=False, peak_gflops=peaks.peak_gflops,
                                  memory=caches.memory_roof(peaks.peak_gbps), family_peaks=peaks.families)
            result["peak_gflops"] = round(prof.peak_gflops or peaks.peak_gflops, 1)  # raised where a kernel beat it
            result["peak_gbps"] = round(peaks.peak_gbps, 1)
            result["kernels"] = [{"task": k.task.split("/")[-1], "ms": round(k.seconds * 1e3, 3),
                                  "share": round(k.share, 3), "gflops": round(k.gflops, 2) if k.gflops else None,
                                  "percent_of_peak": round(k.percent_of_peak, 1) if k.percent_of_peak else None,
                                  "percent_of_roofline": round(k.percent_of_roofline, 1)
                                  if k.percent_of_roofline is not None else None,
                                  "product_share": round(k.product_share, 2)}  # under 0.9: % read on its products
                                 for k in prof.top(5)]
            result["headroom_ms"] = round(prof.headroom_s * 1e3, 3)
            if prof.busy_note:
                result["busy"] = prof.busy_note
        except Exception as exc:  # noqa: BLE001
            result["profile_error"] = _error(exc)
        if opts.cross:
            result["cross"] = {}
            for spec in CROSS_TARGETS:
                try:
                    cross = export_workload(workload, spec, Path(tmp) / spec.replace(":", "-"), verify=True,
                                            layers=False)
                    result["cross"][spec] = {"ok": cross.ok, "verdict": cross.verdict}
                except Exception as exc:  # noqa: BLE001
                    result["cross"][spec] = {"ok": False, "verdict": _error(exc)}
    return result


def _child(entry: dict, folder: Path, opts) -> dict:
    """Bench one model in a child process; a crash or a hang is the row's error."""
    cmd = [sys.executable, "-m", "benchmarks.bench_corpus", "--one", entry["name"], "--dir", str(folder),
           "--set", opts.which, "--precision", opts.precision,
           *(["--manifest", opts.manifest] if opts.manifest else []),
           "--rounds", str(opts.rounds), "--runs", str(opts.runs), "--budget", str(opts.budget),
           "--threads", str(opts.threads), "--busy", str(opts.busy)] + (["--cross"] if opts.cross else [])
    base = _base(entry)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return {**base, "imports": None, "error": f"timed out after {opts.timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {**base, "imports": None, "error": f"the child exited {proc.returncode}: {tail}"[:300]}
    return json.loads(lines[-1])


def _slowest(r: dict) -> str:
    k = (r.get("kernels") or [None])[0]
    if not k:
        return "-"
    pct = f"{k['percent_of_peak']:.0f}%" if k.get("percent_of_peak") is not None else "-"
    gf = f"{k['gflops']:.1f}" if k.get("gflops") is not None else "-"
    return f"{k['task'][:34]} {k['share'] * 100:.0f}% {gf} GF ({pct} peak)"


def row_text(r: dict) -> str:
    ms = r.get("ms", {})

    def f(v):
        return "-" if v is None else f"{v:.2f}"
    state = ("verified" if r.get("verified") else "NOT VERIFIED" if r.get("exported") else
             "refused" if r.get("refused") else "no export" if r.get("imports") else "no import")
    line = (f"{r['name'][:28]:<28} {state:<12} {_error_vs_tolerance(r):>15} {f(ms.get('tvm 2t')):>9} "
            f"{f(ms.get('ort 2t')):>9} "
            f"{f(r.get('ratio_2t')):>6} {f(ms.get('tvm 1t')):>9} {f(ms.get('ort 1t')):>9} {f(r.get('ratio_1t')):>6} "
            f"{f(r.get('ratio_ov_f32')):>6} {f(r.get('ratio_ov_default')):>6} {f(r.get('ratio_fp32')):>6} "
            f"{f(r.get('ratio_fp32_1t')):>6}  "
            f"{_slowest(r)}")
    if r.get("cross"):
        line += "  " + " ".join(f"{t.split(':')[0]}:{'ok' if c['ok'] else 'FAIL'}" for t, c in r["cross"].items())
    if r.get("refused"):
        line += f"\n    refused at {r.get('precision')}: {r['refused']}"
    elif r.get("error"):
        line += f"\n    {r['error']}"
    elif r.get("exported") and not r.get("verified"):
        line += f"\n    {r.get('verdict', '')[:200]}"
    for key in ("precision_note", "fp32_error"):
        if r.get(key):
            line += f"\n    {key.replace('_', ' ')}: {r[key]}"
    if r.get("openvino_error"):  # is the anchor like for like: its outputs by schedx's own rule
        line += "\n    " + "; ".join(f"{name} {e['text']}" for name, e in r["openvino_error"].items())
    return line


def _error_vs_tolerance(r: dict) -> str:
    """``3.1e-03 <= 1e-02``: the verification's largest normalised error (absolute for int8) and the
    tolerance each output was held to."""
    if r.get("verify_error") is None or r.get("tolerance") is None:
        return "-"
    sign = "<=" if r.get("verified") else ">"
    return f"{r['verify_error']:.1e} {sign} {r['tolerance']:.0e}"


HEADER = (f"{'model':<28} {'state':<12} {'error vs tol':>15} {'tvm 2t':>9} {'ort 2t':>9} {'ratio':>6} {'tvm 1t':>9} "
          f"{'ort 1t':>9} {'ratio':>6} {'/ovf32':>6} {'/ovdef':>6} {'/fp32':>6} {'1t':>6}  "
          f"slowest kernel (share, GFLOPS, % of peak)")


def _openvino_summary(results: list[dict]) -> list[str]:
    """The median and worst ratio of tvm 2t against OpenVINO f32 and its default precision, or why
    there is none (the note of a model that has none)."""
    lines = []
    for key, label in (("ratio_ov_f32", "openvino f32"), ("ratio_ov_default", "openvino default")):
        have = [r for r in results if r.get(key) is not None]
        if not have:
            continue
        worst = max(have, key=lambda r: r[key])
        precisions = sorted({r["openvino_default"] for r in have if r.get("openvino_default")})
        label = ", ".join(precisions) if key == "ratio_ov_default" and precisions else label
        lines.append(f"tvm / {label} at 2 threads: median {statistics.median(r[key] for r in have):.2f}x, worst "
                     f"{worst[key]:.2f}x ({worst['name']}), {sum(r[key] <= 1.0 for r in have)}/{len(have)} <= 1.0x")
    lines += _openvino_error_summary(results)
    if not lines:
        note = next((r["openvino_note"] for r in results if r.get("openvino_note")), None)
        lines += [note] if note else []
    return lines


def _openvino_error_summary(results: list[dict]) -> list[str]:
    """Per OpenVINO row: its worst error against ONNX Runtime (of max|ref|) over the models and how
    many were over the bound schedx holds a build of that model at that precision to."""
    by_row: dict[str, list[tuple[str, dict]]] = {}
    for r in results:
        for name, e in (r.get("openvino_error") or {}).items():
            by_row.setdefault(name, []).append((r["name"], e))
    lines = []
    for name, errors in by_row.items():
        # no figure (an output of another shape) counts as the worst
        model, worst = max(errors, key=lambda x: math.inf if x[1]["max_rel_error"] is None else x[1]["max_rel_error"])
        error = "no error figure" if worst["max_rel_error"] is None else f"{worst['max_rel_error']:.2e} of max|ref|"
        lines.append(f"{name} against ONNX Runtime: worst error {error} ({model}), "
                     f"{sum(not e['within'] for _, e in errors)}/{len(errors)} over schedx's rule for the model "
                     f"at {worst['precision']}")
    return lines


def _fp32_summary(results: list[dict]) -> list[str]:
    """At bf16 or int8: the median and worst ratio of tvm against the same model built in fp32."""
    fp32 = [r for r in results if r.get("ratio_fp32") is not None]
    if not fp32:
        return []
    worst = max(fp32, key=lambda r: r["ratio_fp32"])
    line = (f"tvm {fp32[0].get('precision')} / tvm fp32 at 2 threads: median "
            f"{statistics.median(r['ratio_fp32'] for r in fp32):.2f}x, worst {worst['ratio_fp32']:.2f}x "
            f"({worst['name']}), {sum(r['ratio_fp32'] < 1.0 for r in fp32)}/{len(fp32)} faster")
    one = [r["ratio_fp32_1t"] for r in fp32 if r.get("ratio_fp32_1t") is not None]
    return [line + (f"; at 1 thread: median {statistics.median(one):.2f}x, {sum(x < 1.0 for x in one)}/{len(one)} "
                    f"faster" if one else "")]


def exporter_lines(results: list[dict]) -> list[str]:
    """One line per exporter (the exporter set): imports, verified, median and worst ratio to ONNX
    Runtime at 2 threads."""
    lines = []
    for name in dict.fromkeys(r["exporter"] for r in results if r.get("exporter")):
        rows = [r for r in results if r.get("exporter") == name]
        timed = [r for r in rows if r.get("ratio_2t") is not None]
        line = (f"  {name:<16} imports {sum(bool(r.get('imports')) for r in rows)}/{len(rows)}, "
                f"verified {sum(bool(r.get('verified')) for r in rows)}/{len(rows)}")
        if timed:
            worst = max(timed, key=lambda r: r["ratio_2t"])
            line += (f", tvm / ort 2t median {statistics.median(r['ratio_2t'] for r in timed):.2f}x, "
                     f"worst {worst['ratio_2t']:.2f}x ({worst['name']})")
        lines.append(line)
    return ["per exporter:", *lines] if lines else []


def summary(results: list[dict], peak: float | None) -> list[str]:
    n = len(results)
    verified = sum(bool(r.get("verified")) for r in results)
    imports = sum(bool(r.get("imports")) for r in results)
    ratios = [r["ratio_2t"] for r in results if r.get("ratio_2t") is not None]
    refused = [r for r in results if r.get("refused")]
    lines = [f"imports {imports}/{n}, verified {verified}/{n}" + (f", refused {len(refused)}" if refused else "")]
    errors = [r for r in results if r.get("verify_error") is not None and r.get("tolerance_kind") != "absolute"]
    if errors:
        worst = max(errors, key=lambda r: r["verify_error"] / r["tolerance"])
        lines.append(f"verification: worst normalised error {worst['verify_error']:.1e} against a tolerance of "
                     f"{worst['tolerance']:.0e} per output ({worst['name']})")
    if ratios:
        worst = max((r for r in results if r.get("ratio_2t") is not None), key=lambda r: r["ratio_2t"])
        ratios1 = [r["ratio_1t"] for r in results if r.get("ratio_1t") is not None]
        lines.append(f"tvm / onnxruntime at 2 threads: median {statistics.median(ratios):.2f}x, worst "
                     f"{worst['ratio_2t']:.2f}x ({worst['name']}), {sum(x <= 1.5 for x in ratios)}/{len(ratios)} "
                     f"<= 1.5x; at 1 thread: median {statistics.median(ratios1):.2f}x")
    lines += exporter_lines(results)
    lines += _fp32_summary(results)
    lines += _openvino_summary(results)
    slow = [(r["name"], k) for r in results for k in r.get("kernels", [])
            if k["share"] > 0.2 and k.get("percent_of_peak") is not None and k["percent_of_peak"] < 10]
    lines.append(f"kernels over 20% of a model's time below 10% of the peak ({peak or '?'} GFLOPS): {len(slow)}"
                 + "".join(f"\n  {name}: {k['task']} {k['share'] * 100:.0f}% at {k['percent_of_peak']}%"
                           + (f" ({k['percent_of_roofline']}% of its roofline)"
                              if k.get("percent_of_roofline") is not None else "")
                           for name, k in slow))
    if any(r.get("cross") for r in results):
        for spec in CROSS_TARGETS:
            ok = sum(bool(r.get("cross", {}).get(spec, {}).get("ok")) for r in results)
            lines.append(f"{spec} builds and checks: {ok}/{n}")
    return lines


def markdown(results: list[dict]) -> str:
    lines = ["| model | family | verified | error vs tolerance | tvm 2t ms | ort 2t ms | ratio 2t | ratio 1t | / ov f32 | "
             "/ ov default | / tvm fp32 2t | / tvm fp32 1t | slowest kernel |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        ms = r.get("ms", {})
        state = "refused" if r.get("refused") else "yes" if r.get("verified") else "NO"
        lines.append(f"| {r['name']} | {r['family']} | {state} | {_error_vs_tolerance(r)} | "
                     f"{ms.get('tvm 2t', '-')} | {ms.get('ort 2t', '-')} | {r.get('ratio_2t', '-')} | "
                     f"{r.get('ratio_1t', '-')} | {r.get('ratio_ov_f32', '-')} | {r.get('ratio_ov_default', '-')} | "
                     f"{r.get('ratio_fp32', '-')} | {r.get('ratio_fp32_1t', '-')} | {_slowest(r)} |")
    return "\n".join(lines)


def host_refusal(precision: str) -> str:
    """Why this machine cannot build models at ``precision`` ("" where it can): the message
    `schedx export --precision` gives."""
    from explorer.precision import refusal
    from explorer.target import host_target

    return refusal(precision, host_target())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated corpus model names")
    ap.add_argument("--dir", help="the corpus folder (default $SCHEDX_CORPUS or ~/.cache/schedx/corpus)")
    ap.add_argument("--set", dest="which", choices=SETS, default="corpus",
                    help="the corpus, the held-out models of benchmarks/outside (built with --set outside), "
                         "or the files of each exporter (--set exporters, built by benchmarks.exporters.build)")
    ap.add_argument("--manifest", help="a manifest of your own (the models' files in --dir; default: the set's)")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32",
                    help="export and verify each model at this precision, as `schedx export --precision` does (the "
                         "precision's tolerance per output; bf16 timed beside the same model built in fp32); a model "
                         "the precision refuses says why in its row")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per contender per round")
    ap.add_argument("--threads", type=int, default=2, help="threads of the export's verification")
    ap.add_argument("--cross", action="store_true", help="also build for CUDA and aarch64 and check them")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per model")
    ap.add_argument("--busy", type=int, default=0, help="time beside this many busy processes (a loaded machine)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown too (README)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    folder = corpus_dir(opts.dir, opts.which)
    manifest = json.loads(Path(opts.manifest or manifest_path(opts.which)).read_text())
    entries = manifest["models"]
    if opts.one:
        entry = next(e for e in entries if e["name"] == opts.one)
        out(json.dumps(bench_one(entry, folder, opts)))
        return 0
    if opts.only:
        wanted = opts.only.split(",")
        entries = [e for e in entries if e["name"] in wanted]
    missing = [e["name"] for e in entries if not (folder / e["file"]).exists()]
    if missing:
        out(f"not built yet (python -m benchmarks.corpus.build --set {opts.which}): {', '.join(missing)}")
    for failure in manifest.get("failures", []):  # the exporter set: models their exporter could not write
        out(f"not built: {failure['module']}/{failure['name'] or '*'}: {failure['error']}")
    entries = [e for e in entries if e["name"] not in missing]
    why = host_refusal(opts.precision)
    if why:  # bf16 on a CPU without AVX512-BF16 or AMX-BF16: nothing to time
        out(f"refused: {why}")
        return 2
    m = machine()
    out(f"machine: {m['cpu']}, {m['usable_cores']} cores, AVX-512 lines {m['avx512_lines']}, "
        f"target {m['target']} ({m['vector_width']}-bit vectors); {len(entries)} models, rounds {opts.rounds}, "
        f"precision {opts.precision}"
        + (f"; timed beside {opts.busy} busy processes" if opts.busy else ""))
    out(HEADER)
    results = []
    for entry in entries:
        r = _child(entry, folder, opts)
        results.append(r)
        out(row_text(r))
        if opts.json:
            Path(opts.json).write_text(json.dumps({"machine": m, "results": results}, indent=1))
    peak = next((r.get("peak_gflops") for r in results if r.get("peak_gflops")), None)
    for line in summary(results, peak):
        out(line)
    if opts.markdown:
        out(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
