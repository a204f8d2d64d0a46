"""Page "Export": deployable CPU and CUDA modules (coming next)."""

from app.components import coming_next

coming_next("Export", "Build the chosen schedules into a library a plain TVM runtime loads.", [
    "CPU (llvm) and GPU (cuda, sm_80/sm_90) bundles with parameters and a manifest",
    "verification against ONNX Runtime, layer by layer",
])
