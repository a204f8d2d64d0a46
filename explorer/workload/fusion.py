"""A model's fused module: the task pipeline (:data:`explorer.passes.pipelines.TASK_PIPELINE`:
batch-norm folded, NHWC layouts, then LegalizeOps .. FuseTIR, weights marked) whose PrimFuncs are the tasks a
search tunes and an export schedules. Search and export both call :func:`fused_module`, so a
task's key is the same in both; changing the pipeline changes the keys (old records no longer
match, they are not wrong)."""

from __future__ import annotations

import tvm

from explorer.errors import ExplorerError, short_tvm_message


class WorkloadError(ExplorerError):
    """A workload spec could not be loaded or split into tasks."""


def fused_module(mod: tvm.IRModule, name: str = "the model", target=None) -> tvm.IRModule:
    """``mod`` after the task pipeline: the PrimFuncs a search extracts its tasks from and an export
    schedules, for ``target`` (:func:`pipeline_target`)."""
    from explorer.passes.pipelines import TASK_PIPELINE, get_pipeline

    tvm_target = pipeline_target(target)
    try:
        with tvm.transform.PassContext(opt_level=3), tvm_target:
            return get_pipeline(TASK_PIPELINE).build(tvm_target)(mod)
    except Exception as err:
        raise WorkloadError(f"the task pipeline failed on {name}: {short_tvm_message(err)}") from err


def pipeline_target(target=None) -> tvm.target.Target:
    """The TVM target the task pipeline runs under for ``target`` (an :class:`explorer.target.Target`):
    a CPU other than this machine's (a named or cross-compiled one) or a device is itself, so that the
    passes whose rewrite pays on some CPUs only (:mod:`explorer.passes.pass_target`: padded channels,
    Winograd products, int8 kernels) decide for the CPU the code is built for, never for the build host,
    and leave a device's module alone (TVM's own passes then lower sorts and scatters for that device);
    this machine or None is a generic host target, which those passes read as this machine."""
    own = own_pipeline_target(target)
    return tvm.target.Target({"kind": "llvm"}) if own is None else own.tvm()


def own_pipeline_target(target):
    """``target`` where its task pipeline differs from this machine's (another CPU, or a device), else None."""
    return None if target is None or (target.is_host and target.cpu_rules) else target


__all__ = ["WorkloadError", "fused_module", "own_pipeline_target", "pipeline_target"]
