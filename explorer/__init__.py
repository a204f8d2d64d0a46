"""The compiler side of schedx, on TVM: workloads, targets, passes, schedules, measurement.

Where a new thing goes (the design: ``ARCHITECTURE.md`` in the project's shared folder; imports
point one way, ``app -> export -> search -> explorer -> store``):

=========================================  ==================================================
a default schedule rule for a kernel kind   ``explorer/schedule/defaults/`` (CPU rules as rows of
(CPU, GPU, int8, bf16, recurrent layers)    ``DefaultVariant`` in ``apply.py``, ``gpu.py``,
                                            ``int8.py``, ``bf16.py``, ``recurrence.py``; tensor
                                            intrinsics in ``explorer/schedule/*_intrin.py`` /
                                            ``*_dot.py`` / ``microkernel.py``)
a built-in kernel (matmul, conv2d, ...)     ``explorer/kernels/builtin.py``
an ONNX rewrite before import               ``explorer/models/`` (one module per rewrite,
                                            registered in ``models/prepare.py``)
a Relax graph rewrite, a pass diff          ``explorer/passes/`` (``textdiff.py``: TVMScript
                                            diffs between snapshots)
a walk over Relax or TensorIR, TVM values   ``explorer/ir/`` (``relax_walk``, ``tir_walk``,
as JSON                                     ``plain``)
a CPU architecture                          one ``CpuArch`` in ``explorer/target/arches.py``
                                            (vector width, features, ISA words, /proc/cpuinfo
                                            field, its ``AsmSyntax`` from ``target/asm.py``)
a device kind                               one module in ``explorer/target/`` (a ``Target``
                                            subclass with its checks and bundle files, a
                                            ``TargetKind``), added to ``target/kinds.py``
the host's CPU, hardware fingerprint        ``explorer/target/host.py``, ``target/environment.py``
what a measurement is, peaks, verification  ``explorer/measure/`` (``machine_load.py``: how busy
                                            the machine is, what a timing is worth)
cross-cutting, so at explorer's top:        ``errors.py`` (the room's exceptions), ``precision.py``
every room of schedx uses them              (a build's fp32/bf16), ``interrupts.py`` (Ctrl-C,
                                            SIGTERM), ``temp_dirs.py``, ``processes.py`` (is a
                                            process alive), ``fault_points.py`` (where the fault
                                            suite holds a process), ``tvm_fast.py`` (starting TVM),
                                            ``text.py`` (text cut to fit where it is read)
=========================================  ==================================================
"""

from explorer.tvm_fast import hold_back_torch

hold_back_torch()  # before anything imports TVM: tvm_ffi would import torch for nothing (~1 s)
