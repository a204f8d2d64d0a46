"""The compiler side of schedx, on TVM: workloads, targets, passes, schedules, measurement.

Where a new thing goes (the design: ``ARCHITECTURE.md`` in the project's shared folder; imports
point one way, ``app -> export -> search -> explorer -> store``):

=========================================  ==================================================
a default schedule rule for a kernel kind   ``explorer/schedule/defaults/`` (rows of data beside
(CPU, int8, bf16)                           the others; tensor intrinsics in
                                            ``explorer/schedule/*_intrin.py`` / ``*_dot.py``)
a GPU default rule                          ``explorer/schedule/gpu_defaults.py``
a recurrent kernel (LSTM/GRU steps)         ``explorer/kernels/``
an ONNX rewrite before import               ``explorer/models/`` (one module per rewrite,
                                            registered in ``models/prepare.py``)
a Relax graph rewrite                       ``explorer/passes/``
a CPU architecture                          one ``CpuArch`` in ``explorer/target/arches.py``
                                            (vector width, features, ISA words, /proc/cpuinfo
                                            field, its ``AsmSyntax`` from ``target/asm.py``)
a device kind                               one module in ``explorer/target/`` (a ``Target``
                                            subclass with its checks and bundle files, a
                                            ``TargetKind``), added to ``target/kinds.py``
a build precision (fp32, bf16)              ``explorer/precision.py``
what a measurement is, peaks, verification  ``explorer/measure/``
how Ctrl-C/SIGTERM unwind, temp folders     ``explorer/interrupts.py``, ``explorer/temp_dirs.py``
=========================================  ==================================================
"""

from explorer.tvm_fast import hold_back_torch

hold_back_torch()  # before anything imports TVM: tvm_ffi would import torch for nothing (~1 s)
