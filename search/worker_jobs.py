"""What schedx's search workers do (see :mod:`search.pool`): build a candidate, compute a task's
reference outputs, and check then time a built candidate.

Functions here run in the worker processes and take and return plain data; this module imports
TVM only inside them, so the parent can name them before it has imported TVM.

Verification: a task's reference is its unscheduled PrimFunc, built as is and run once on seeded
random inputs; the inputs and the outputs it gave are saved as ``.npz``. Every candidate then
runs once on those inputs and its outputs are compared with the tolerance of
:mod:`explorer.measure.verify` before it is timed: a schedule that computes something else fails
as ``verify_failed`` and is never ranked. (MetaSchedule alone times candidates on random data
and never looks at what they compute.)
"""

from __future__ import annotations

import os
import tempfile

VERIFY_FAILED = "verify failed: "

# (shape, dtype, is_output) per parameter of a task's PrimFunc, in order.
ArgSpecs = list[tuple[tuple[int, ...], str, bool]]

_references: dict[str, dict] = {}  # reference path -> arrays, kept while the worker lives


def prepare(target_kind: str, triple: str | None) -> bool:
    """Worker start-up: TVM, the target's tensor intrinsics, the build passes."""
    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin(target_kind, triple)
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: F401

    return True


def build(mod, target) -> str:
    """Build a candidate as MetaSchedule's default builder does; returns the artifact (a tar
    that both the local and the RPC runners load)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm.build(mod, target=target)
    path = os.path.join(tempfile.mkdtemp(prefix="schedx-build-"), "tvm_tmp_mod." + tar.output_format)
    rt_mod.export_library(path, fcompile=tar)
    return path


def reference(mod, target, specs: ArgSpecs, path: str, seed: int = 0) -> str:
    """Run the unscheduled ``mod`` once on seeded inputs; save inputs and outputs to ``path``."""
    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array

    rng = np.random.default_rng(seed)
    arrays = [np.zeros(shape, dtype) if is_out else random_array(shape, dtype, rng) for shape, dtype, is_out in specs]
    rt_mod = tvm.compile(mod, target=target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    rt_mod["main"](*args)
    np.savez(path, **{f"a{i}": (args[i].numpy() if specs[i][2] else arrays[i]) for i in range(len(specs))})
    return path


def _load_reference(path: str) -> dict:
    import numpy as np

    if path not in _references:
        with np.load(path) as data:
            _references[path] = {k: data[k] for k in data.files}
    return _references[path]


def measure(artifact_path: str, specs: ArgSpecs, evaluator: dict, reference_path: str | None,
            reject_above_s: float | None = None) -> dict:
    """Load a built candidate, check its outputs against the reference (when there is one), then
    time it as MetaSchedule's local runner does. A candidate whose first run already took longer
    than ``reject_above_s`` keeps that one run as its time (``"early": True``) instead of being
    timed again and again: it cannot win. Returns ``{"secs": [...], "max_error": e, "early": b}``
    or ``{"error": why}``."""
    import time

    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array
    from explorer.measure.verify import compare

    rt_mod = tvm.runtime.load_module(artifact_path)
    dev = tvm.cpu()
    if reference_path:
        ref = _load_reference(reference_path)
        host = [np.zeros(shape, dtype) if is_out else ref[f"a{i}"] for i, (shape, dtype, is_out) in enumerate(specs)]
    else:
        rng = np.random.default_rng(0)
        host = [random_array(shape, dtype, rng) for shape, dtype, _ in specs]
    args = [tvm.runtime.tensor(a, dev) for a in host]
    max_error = None
    if reference_path or reject_above_s is not None:
        func = rt_mod[rt_mod.entry_name]
        start = time.perf_counter()
        func(*args)
        dev.sync()
        once = time.perf_counter() - start
        if reference_path:
            outs = [i for i, spec in enumerate(specs) if spec[2]]
            ok, max_error, _, why = compare([args[i].numpy() for i in outs], [ref[f"a{i}"] for i in outs])
            if not ok:
                return {"error": VERIFY_FAILED + why, "max_error": max_error}
        if reject_above_s is not None and once > reject_above_s:
            return {"secs": [once], "max_error": max_error, "early": True}
    timer = rt_mod.time_evaluator(rt_mod.entry_name, dev, number=evaluator["number"], repeat=evaluator["repeat"],
                                  min_repeat_ms=evaluator["min_repeat_ms"])
    dev.sync()
    return {"secs": [float(x) for x in timer(*args).results], "max_error": max_error, "early": False}
