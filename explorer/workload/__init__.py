"""Workloads: the one place that turns what a user typed into a model or a kernel, names and keys
it (MetaSchedule's structural hash), and splits it into tasks (fused kernels, equal ones merged,
weighted by call count). Search, export, bench, the CLI and the pages all call it."""

from explorer.workload.keys import (as_task_module, describe_module, module_from_b64, module_hash, module_to_b64,
                                    owned_task_module, tag_task, task_tag, untagged, workload_key)
from explorer.workload.fusion import WorkloadError, fused_module
from explorer.workload.loaded import Workload, kernel_module, load_workload
from explorer.workload.model_kernels import load_kernel, model_kernels
from explorer.workload.spec import is_kernel_spec
from explorer.workload.task import Task, call_counts, kernel_task, module_tasks

__all__ = ["Task", "Workload", "WorkloadError", "as_task_module", "call_counts", "describe_module", "fused_module",
           "is_kernel_spec", "kernel_module", "kernel_task", "load_kernel", "model_kernels", "load_workload", "module_from_b64", "module_hash",
           "module_to_b64", "module_tasks", "owned_task_module", "tag_task", "task_tag", "untagged", "workload_key"]
