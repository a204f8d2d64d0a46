"""What schedx's search workers do (see :mod:`search.pool`): build a candidate, compute a task's
reference outputs, and check then time a built candidate.

Functions here run in the worker processes and take and return plain data; this module imports
TVM only inside them, so the parent can name them before it has imported TVM.

Verification: a task's reference is its unscheduled PrimFunc, built as is and run once on seeded
random inputs, its output buffers filled with random values too (a schedule that drops a
reduction's initialisation then shows); those starting values (``a0``, ``a1``, ...) and the
outputs it gave (``e<i>`` for output ``i``) are saved as ``.npz``. Every candidate then runs once
from the same starting values and its outputs are compared with the tolerance of
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


def build(mod, target, work_dir: str | None = None) -> str:
    """Build a candidate as MetaSchedule's default builder does; returns the artifact (a tar
    that both the local and the RPC runners load), in a new folder under ``work_dir``."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm.build(mod, target=target)
    path = os.path.join(tempfile.mkdtemp(prefix="schedx-build-", dir=work_dir), "tvm_tmp_mod." + tar.output_format)
    rt_mod.export_library(path, fcompile=tar)
    return path


def reference(mod, target, specs: ArgSpecs, path: str, seed: int = 0) -> str:
    """Run the unscheduled ``mod`` once on seeded inputs on this machine's CPU (``target``: an
    LLVM target); save inputs and outputs to ``path``."""
    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array

    rng = np.random.default_rng(seed)
    arrays = [random_array(shape, dtype, rng) for shape, dtype, _ in specs]
    rt_mod = tvm.compile(mod, target=tvm.target.Target(target))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    rt_mod["main"](*args)
    expected = {f"e{i}": args[i].numpy() for i, spec in enumerate(specs) if spec[2]}
    np.savez(path, **{f"a{i}": a for i, a in enumerate(arrays)}, **expected)
    return path


def _load_reference(path: str) -> dict:
    import numpy as np

    if path not in _references:
        with np.load(path) as data:
            _references[path] = {k: data[k] for k in data.files}
    return _references[path]


def _remote(artifact_path: str, rpc: dict, device: str):
    """A session on a device the tracker hands out, with the artifact uploaded and loaded there."""
    from tvm import rpc as tvm_rpc

    from search.pool import INFRASTRUCTURE

    try:
        tracker = tvm_rpc.connect_tracker(rpc["host"], rpc["port"])
        session = tracker.request(rpc["key"], priority=0, session_timeout=rpc.get("session_timeout", 60))
    except Exception as err:
        raise RuntimeError(f"{INFRASTRUCTURE}no RPC device with key {rpc['key']!r} from the tracker at "
                           f"{rpc['host']}:{rpc['port']}: {err}") from err
    session.upload(artifact_path)
    return session.load_module(os.path.basename(artifact_path)), session.device(device, 0)


def measure(artifact_path: str, specs: ArgSpecs, evaluator: dict, reference_path: str | None,
            reject_above_s: float | None = None, rpc: dict | None = None, device: str = "cpu") -> dict:
    """Load a built candidate (here, or on a device of the RPC tracker ``rpc``: host, port,
    key), check its outputs against the reference (when there is one), then time it as
    MetaSchedule's runners do. A candidate whose first run already took longer than
    ``reject_above_s`` keeps that one run as its time (``"early": True``) instead of being timed
    again and again: it cannot win. Returns ``{"secs": [...], "max_error": e, "early": b}`` or
    ``{"error": why}``."""
    import time

    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array
    from explorer.measure.verify import compare

    if rpc:
        rt_mod, dev = _remote(artifact_path, rpc, device)
    else:
        rt_mod, dev = tvm.runtime.load_module(artifact_path), tvm.runtime.device(device, 0)
    if reference_path:
        ref = _load_reference(reference_path)
        host = [ref[f"a{i}"] for i in range(len(specs))]
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
            ok, max_error, _, why = compare([args[i].numpy() for i in outs], [ref[f"e{i}"] for i in outs])
            if not ok:
                return {"error": VERIFY_FAILED + why, "max_error": max_error}
        if reject_above_s is not None and once > reject_above_s:
            return {"secs": [once], "max_error": max_error, "early": True}
    timer = rt_mod.time_evaluator(rt_mod.entry_name, dev, number=evaluator["number"], repeat=evaluator["repeat"],
                                  min_repeat_ms=evaluator["min_repeat_ms"])
    dev.sync()
    return {"secs": [float(x) for x in timer(*args).results], "max_error": max_error, "early": False}
