"""Build, verify and time kernels on the host CPU, in a child process by default.

:func:`measure` is the one call: a kernel, a scheduled module, and back comes a
:class:`MeasureResult` with latencies, GFLOPS, verification, % of the measured peak and the
environment. A schedule that fails to build, crashes, hangs or computes wrong numbers comes back
as a result with a status and an error, never as an exception; a kernel too large for the free
memory is refused before anything is allocated (:class:`MemoryLimitError`).
"""

from __future__ import annotations

import tvm

from explorer.target.environment import current_environment
from explorer.kernels import Kernel
from explorer.measure.calibration import Calibration, calibration
from explorer.measure.memory import MemoryLimitError
from explorer.measure.peak_check import within_peak
from explorer.measure.result import MeasureResult
from explorer.schedule.isa_check import IsaError, require_isa
from explorer.target import Target, parse_target
from store.outcome import Outcome

DEFAULT_TIMEOUT_S = 300
_NO_PEAKS = Calibration(hardware="", peak_gflops=0.0, peak_gbps=0.0, measured_at="")  # a check times nothing


def measure(kernel: Kernel, mod: tvm.IRModule | None = None, *, target: Target | str | None = None, repeat: int = 5,
            min_repeat_s: float = 0.1, isolate: bool = True, timeout: float = DEFAULT_TIMEOUT_S, seed: int = 0,
            peaks: Calibration | None = None) -> MeasureResult:
    """Measure ``mod`` (default: the unscheduled kernel) as an implementation of ``kernel``.

    The reference is the kernel's numpy function for built-ins, else the unscheduled PrimFunc
    built by TVM. ``peaks`` defaults to this machine's cached calibration; the peak is that of the
    kernel's instruction family (:mod:`explorer.measure.families`: fp32, bf16 or int8), and a kernel
    faster than it raises it (:func:`explorer.measure.peak_check.within_peak`, said in ``peak_note``).
    ``target`` (default: this machine's CPU) must be one this machine runs, and have the instructions
    ``mod`` calls (:func:`explorer.schedule.isa_check.require_isa`: LLVM aborts on the others):
    :class:`explorer.target.TargetError` otherwise."""
    from dataclasses import replace

    import numpy as np

    target = parse_target(target)
    target.require_runnable("measure")
    mod = mod if mod is not None else tvm.IRModule({"main": kernel.func})
    require_isa(mod, target, "measure")
    interface = interface_change(kernel, mod)
    if interface:
        return MeasureResult(status=Outcome.BUILD_ERROR, error=interface, flops=kernel.info.flops, target=target.key)
    require_memory(kernel, "measuring")  # before a single input is allocated
    inputs = kernel.random_inputs(seed)
    references = [np.asarray(r) for r in kernel.reference(*inputs)] if kernel.reference else None
    job = {"mod": mod, "target": target.config, "target_text": target.key, "flops": kernel.info.flops,
           "inputs": inputs, "references": references,
           "reference_func": None if references is not None else kernel.func,
           "output_specs": [(b.shape, b.dtype) for b in kernel.outputs], "repeat": repeat,
           "min_repeat_s": min_repeat_s, "min_bytes": kernel.info.min_bytes}
    if isolate:
        from explorer.measure.worker import run_in_child

        result = run_in_child(job, timeout)
    else:
        from explorer.measure.worker import _measure_job

        result = _measure_job(job)
    from explorer.measure.families import kernel_family

    cal = peaks or calibration()
    family = kernel_family(kernel.func)  # a bf16 or int8 kernel reads against its own units' peak
    from explorer.workload.product_flops import beside_products

    above = result.ok and (result.gflops or 0.0) > (cal.peak_for(family) or float("inf"))
    products = not above or not beside_products(tvm.IRModule({"main": kernel.func}))  # else no FMA figure
    check = within_peak(result.gflops if result.ok else None, kernel.info.spec or kernel.name, peaks=cal,
                        family=family, products=products)
    cal = check.calibration or cal
    peak = cal.peak_for(family)
    env = current_environment(target.key).to_dict()
    env.update(peak_gflops=peak, peak_gbps=cal.peak_gbps, peak_family=family)
    return replace(result.with_peaks(peak, cal.peak_gbps, check.note, check.trusted), environment=env,
                   peak_family=family)


def require_memory(kernel: Kernel, doing: str = "measuring") -> None:
    """Refuse (:class:`MemoryLimitError`) a kernel whose measurement would not fit in the memory
    that is free (see :mod:`explorer.measure.memory`); nothing is allocated to find out."""
    from explorer.measure.memory import buffer_bytes, check_memory, measure_bytes

    ins, outs = buffer_bytes((b.shape, b.dtype, b.is_output) for b in kernel.info.buffers)
    check_memory(measure_bytes(ins, outs), f"{doing} {kernel.info.spec or kernel.name}")


def interface_change(kernel: Kernel, mod: tvm.IRModule) -> str:
    """Why ``mod`` no longer takes the kernel's buffers ("" if it still does).

    ``transform_layout`` on a parameter changes the function's signature: the kernel's inputs
    no longer fit. Say so instead of failing with a shape mismatch at run time."""
    params = mod["main"].params
    if len(params) != len(kernel.info.buffers):
        return f"the schedule changed the kernel's parameters ({len(kernel.info.buffers)} -> {len(params)})"
    for buf, spec in zip(params, kernel.info.buffers):
        shape = tuple(int(s) for s in buf.shape)
        if shape != spec.shape or str(buf.dtype) != spec.dtype:
            return (f"the schedule changed parameter {spec.name} from {'x'.join(map(str, spec.shape))} {spec.dtype} "
                    f"to {'x'.join(map(str, shape))} {buf.dtype}: its inputs no longer fit. Transform the layout of "
                    f"a cache (cache_read first, then transform_layout on the cache block) instead")
    return ""


__all__ = ["Calibration", "MeasureResult", "MemoryLimitError", "calibration", "check", "measure", "require_memory"]


def check(kernel: Kernel, mod: tvm.IRModule, *, target: Target | str | None = None, seed: int = 0,
          isolate: bool = True, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """Build and run ``mod`` once and compare with the reference, no timing: ``(verified, why
    not)``. In a child process by default, like :func:`measure` (a schedule that crashes the
    build or the run, such as a tensorize for instructions the target lacks, is a failed check);
    ``isolate=False`` runs it here, for schedules known not to crash. A schedule whose instructions the
    target lacks is a failed check without a build (:class:`explorer.schedule.isa_check.IsaError`'s reason)."""
    try:
        result = measure(kernel, mod, target=target, repeat=0, isolate=isolate, timeout=timeout, seed=seed,
                         peaks=_NO_PEAKS)
    except IsaError as err:
        return False, str(err)
    return bool(result.verified), "" if result.verified else (result.error or result.status)