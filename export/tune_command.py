"""The ``schedx tune`` command that searches one task of a build, as that build made it: what a
build's warning on a kernel whose default schedule fell back suggests
(:mod:`explorer.schedule.defaults.fallbacks`).

A command names what :meth:`search.job_spec.JobSpec.validate` loads back to the same task:

- a kernel (``matmul:M=64,N=64,K=32``, ``model.onnx/fused_conv``): the kernel spec itself;
- a model at fp32 built for this machine: the model's fused kernel (``small_cnn/fused_conv2d_add``,
  ``/path/to/model.onnx/fused_conv2d_add``: the spec the user gave, ``/``, the kernel's function);
- a model whose kernels a spec cannot name: the whole model. That is a model at bf16 or int8 (its
  tasks are those of the model rewritten at that precision: ``--precision``, and for int8 the
  calibration it was quantized with), one built for another CPU (its task pipeline is that CPU's,
  a fused-kernel spec loads this machine's), and one whose spec holds a ``:`` (``example:densenet121``:
  a fused-kernel spec with a ``:`` reads as a built-in kernel).

``--shapes`` where the workload was loaded with shapes (an int8 model: its quantized model's input
shapes, which the float model takes too), ``--target`` the build's target as it is spelled.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from explorer.kernels import fused_kernel_spec
from explorer.precision import DEFAULT_SAMPLES
from explorer.target import Target
from explorer.workload import Task, Workload


def tune_command(workload: Workload, target: Target, task: str) -> str:
    """The ``schedx tune`` command line (quoted for a POSIX shell) that searches the task named ``task`` of
    ``workload``, a workload as built (:func:`export.build.as_built`), for ``target``."""
    precision = getattr(workload.precision, "name", "fp32")
    spec, shapes, options = workload.spec, workload.shapes, []
    if workload.kind == "model" and precision == "int8":
        quantization = workload.precision.quantization or {}
        spec, shapes = str(quantization.get("from") or spec), workload.input_shapes  # the float model, as quantized
        samples, data = quantization.get("calibration_samples"), quantization.get("calibration_data")
        options += ["--precision", "int8"]
        if samples and int(samples) != DEFAULT_SAMPLES:
            options += ["--calibrate", str(samples)]
        if data and data != "random":
            options += ["--data", str(data)]
    elif workload.kind == "model" and precision != "fp32":
        options += ["--precision", precision]
    elif workload.kind == "model" and workload.build_target is None:
        spec = fused_kernel_spec(spec, task) or spec
    if shapes:
        options += ["--shapes", shapes]
    return shlex.join(["schedx", "tune", spec, *options, "--target", target.spec])


def tune_commands(workload: Workload, target: Target, tasks: Iterable[Task]) -> dict[str, str]:
    """Task name -> :func:`tune_command`, for each of ``tasks``."""
    return {task.name: tune_command(workload, target, task.name) for task in tasks}


__all__ = ["tune_command", "tune_commands"]
