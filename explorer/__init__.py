"""The compiler side of schedx, on TVM (see ARCHITECTURE.md)."""

from explorer.tvm_fast import hold_back_torch

hold_back_torch()  # before anything imports TVM: tvm_ffi would import torch for nothing (~1 s)
