"""schedx front ends: the Streamlit pages and the `schedx` command line."""

import explorer  # noqa: F401  installs explorer.tvm_fast.hold_back_torch before TVM is imported
