"""The annotation by which a loop brings its micro-kernels' LLVM IR into the module TVM builds (TVM's
``pragma_import_llvm``: the IR functions of :mod:`explorer.schedule.bf16_dot`, ``amx_ir`` and
``explorer.measure.dot_peaks``, inlined by LLVM), and the one name every schedule, check and peak
kernel reads it by."""

IMPORT_LLVM = "pragma_import_llvm"

__all__ = ["IMPORT_LLVM"]
