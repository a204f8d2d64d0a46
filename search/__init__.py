"""The automatic side of schedx: sketches, MetaSchedule search, jobs, RPC measurement."""

import explorer  # noqa: F401  installs explorer.tvm_fast.hold_back_torch before TVM is imported
