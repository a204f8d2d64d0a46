"""Page "Schedule": apply TensorIR schedule primitives by hand (coming next)."""

from app.components import coming_next

coming_next("Schedule", "Pick a kernel and schedule it by hand, step by step.", [
    "kernels: built-in operators (matmul, conv2d, ...) and every fused PrimFunc of the current model",
    "apply split, reorder, fuse, vectorize, parallel, unroll, cache_read/write, compute_at, ... with undo/redo",
    "TVMScript and loop nest after each step; build, verify against numpy, measure GFLOPS and % of peak",
])
