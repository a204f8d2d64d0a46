"""The most groups :mod:`explorer.passes.conv_groups` splits a grouped convolution into, apart from
that pass (which imports TVM) so that :mod:`explorer.precision`, loaded when the CLI starts, can
name it in what a bf16 build keeps in fp32 without importing TVM."""

# each group is one kernel call reading its own slice of the input: ResNeXt's 32 groups are left in fp32
MAX_GROUPS = 8

__all__ = ["MAX_GROUPS"]
