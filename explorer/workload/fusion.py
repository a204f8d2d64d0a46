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


def fused_module(mod: tvm.IRModule, name: str = "the model") -> tvm.IRModule:
    """``mod`` after the task pipeline (on a generic host target): the PrimFuncs a search extracts
    its tasks from and an export schedules."""
    from explorer.passes.pipelines import TASK_PIPELINE, get_pipeline

    target = tvm.target.Target({"kind": "llvm"})
    try:
        with tvm.transform.PassContext(opt_level=3), target:
            return get_pipeline(TASK_PIPELINE).build(target)(mod)
    except Exception as err:
        raise WorkloadError(f"the task pipeline failed on {name}: {short_tvm_message(err)}") from err


__all__ = ["WorkloadError", "fused_module"]
