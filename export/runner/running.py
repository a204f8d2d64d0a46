"""A checked bundle loaded and run: its library in TVM's runtime VM, its parameters and inputs,
timed runs, a per-kernel profile, and the outputs compared with the reference by the one rule.
Part of a bundle's ``run.py`` (:mod:`export.runner`): numpy and TVM only."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from export.runner.bundle_check import BundleCheckError, check_bundle, file_with_role
from export.runner.compare import compare_outputs
from export.runner.cuda_code import cuda_code_loader, load_cuda_runtime
from export.runner.threads import ThreadChoice

_FOREIGN = ("explorer", "app", "search", "store", "onnx", "onnxruntime", "torch", "streamlit", "click")


def _flatten(value) -> list:
    if hasattr(value, "numpy"):
        return [value]
    out = []
    for v in value:
        out.extend(_flatten(v))
    return out


def profile_calls(vm, args: list, dev, runs: int) -> dict:
    """Seconds per run spent in each function ``main`` calls (kernels by their symbol, VM builtins
    too), timed around every call by a VM instrument, and the end-to-end time of those runs (the
    instrument's own cost is the difference between the two). Each figure is the median over
    ``runs`` runs, after one run that is not counted: a sum over the runs took in every pause of
    the Python callback, and a small model's rows moved severalfold between profiles."""
    import statistics

    totals: dict[str, list] = {}
    started: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            started.append(time.perf_counter())
        else:
            dev.sync()
            entry = totals.setdefault(str(symbol), [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started.pop()
        return 0

    vm.set_instrument(instrument)
    vm["main"](*args)  # a first instrumented run, not counted: it pays the callback's set-up once
    dev.sync()
    per_run: list[dict[str, list]] = []
    walls = []
    for _ in range(runs):
        totals.clear()
        begin = time.perf_counter()
        vm["main"](*args)
        dev.sync()
        walls.append(time.perf_counter() - begin)
        per_run.append({name: list(entry) for name, entry in totals.items()})
    vm.set_instrument(None)
    names = {name for run in per_run for name in run}
    calls = {name: {"calls": max(run.get(name, [0, 0.0])[0] for run in per_run),
                    "seconds": statistics.median(run.get(name, [0, 0.0])[1] for run in per_run)} for name in names}
    return {"runs": runs, "instrumented_run_s": statistics.median(walls), "calls": calls}


def run_bundle(folder: str | os.PathLike, *, inputs_file: str | None = None, device: str | None = None,
               runs: int = 0, budget_s: float = 30.0, profile: int = 0,
               trust: str | os.PathLike | None = None, adapt_threads: bool = False) -> tuple[dict, list]:
    """Check, load and run a bundle: a report (plain data) and the outputs (numpy arrays).

    The report holds ``load_s`` (library, VM, parameters), ``first_s`` (the first inference) and,
    with ``runs``, ``latencies_s``/``median_s``/``p90_s`` of up to ``runs`` more runs (fewer when
    ``budget_s`` is spent), and with ``profile`` the time per called function (:func:`profile_calls`).
    ``trust``: a public key the manifest's signature must verify with (see the module docstring)."""
    import numpy as np

    folder = Path(folder)
    manifest = check_bundle(folder, trust=trust)
    import tvm
    from tvm.runtime.vm import VirtualMachine  # the runtime's VM: a runtime-only TVM loads the bundle

    device = device or manifest.get("target", {}).get("device", "cpu")
    dev = tvm.cuda(0) if device == "cuda" else tvm.cpu(0)
    if device == "cuda" and not load_cuda_runtime():
        raise BundleCheckError("this is a CUDA bundle and no CUDA device is visible here")
    cuda_code: list[str] = []
    if device == "cuda":
        import tvm.support.nvcc  # noqa: F401 - registers TVM's callback first, so ours overrides it
        import tvm_ffi

        tvm_ffi.register_global_func("tvm_callback_cuda_compile", cuda_code_loader(folder, manifest, cuda_code),
                                     override=True)
    start = time.perf_counter()
    lib = tvm.runtime.load_module(str(folder / file_with_role(manifest, "library")))
    vm = VirtualMachine(lib, dev)
    params = []
    params_file = file_with_role(manifest, "params")
    if manifest.get("params"):
        if params_file is None:
            raise BundleCheckError("the manifest lists parameters but no parameters file")
        table = tvm.runtime.load_param_dict_from_file(str(folder / params_file))
        missing = [p["name"] for p in manifest["params"] if p["name"] not in table]
        if missing:
            raise BundleCheckError(f"{params_file} lacks parameter(s) {', '.join(missing[:5])}")
        params = [tvm.runtime.tensor(table[p["name"]].numpy(), dev) for p in manifest["params"]]
    load_s = time.perf_counter() - start

    source = Path(inputs_file) if inputs_file else folder / (file_with_role(manifest, "inputs") or "inputs.npz")
    with np.load(source) as data:
        arrays = []
        for spec in manifest["inputs"]:
            if spec["name"] not in data:
                raise BundleCheckError(f"{source} has no input {spec['name']!r}")
            # np.array keeps a 0-d input 0-d (np.ascontiguousarray makes it shape (1,))
            arrays.append(np.array(data[spec["name"]], dtype=spec["dtype"], order="C"))
    args = [tvm.runtime.tensor(a, dev) for a in arrays] + params

    start = time.perf_counter()
    result = vm["main"](*args)
    dev.sync()
    first_s = time.perf_counter() - start
    outputs = [t.numpy() for t in _flatten(result)]
    report = {"bundle": str(folder), "workload": manifest.get("workload", {}).get("spec"),
              "target": manifest.get("target", {}).get("label"), "device": device, "tvm_version": tvm.__version__,
              "threads": os.environ.get("TVM_NUM_THREADS"), "bind_threads": os.environ.get("TVM_BIND_THREADS"),
              "spin_count": os.environ.get("TVM_THREAD_POOL_SPIN_COUNT"),
              "load_s": load_s, "first_s": first_s, **({"cuda_code": cuda_code} if device == "cuda" else {}),
              "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}

    if runs > 0:
        # adapt_threads: fewer threads while other processes' threads are runnable (export.runner.threads)
        choice = ThreadChoice(tvm.get_global_func("runtime.NumThreads")()) if adapt_threads and device == "cpu" \
            else None
        latencies = []
        begin = time.perf_counter()
        for _ in range(runs):
            t0 = time.perf_counter()
            if choice is not None:
                choice.before_run()
            vm["main"](*args)
            dev.sync()
            latencies.append(time.perf_counter() - t0)
            if time.perf_counter() - begin > budget_s and len(latencies) >= 3:
                break
        report.update(latencies_s=latencies, runs=len(latencies), median_s=float(np.median(latencies)),
                      p90_s=float(np.percentile(latencies, 90)))
        if choice is not None:
            report.update(threads_last=choice.threads, thread_changes=choice.changes)

    if profile > 0:
        report["profile"] = profile_calls(vm, args, dev, profile)

    reference = file_with_role(manifest, "reference")
    if reference and not inputs_file:
        with np.load(folder / reference) as data:
            refs = [data[f"output{k}"] for k in range(len(data.files))]
        tol = float(manifest.get("tolerance", 1e-4))
        check = compare_outputs(outputs, refs, rtol=tol, output_atol=manifest.get("output_atol"),
                                activations=manifest.get("output_activation"))
        check.update(tolerance=tol, reference=manifest.get("reference", "reference"),
                     output_atol=[a for a in manifest.get("output_atol") or [] if a])
        report["check"] = check
    report["foreign_modules"] = sorted(m for m, mod in sys.modules.items() if m in _FOREIGN and mod is not None)
    return report, outputs


__all__ = ["profile_calls", "run_bundle"]
