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
from dataclasses import dataclass

from store.outcome import Outcome

# (shape, dtype, is_output) per parameter of a task's PrimFunc, in order.
ArgSpecs = list[tuple[tuple[int, ...], str, bool]]


@dataclass(frozen=True)
class Timed:
    """What :func:`measure` says of a built candidate: ``Outcome.OK`` with its run times
    (``early``: one run only, far slower than the task's best), or ``Outcome.VERIFY_FAILED`` with
    why (``error``); ``max_error`` against the reference (None without one)."""

    outcome: Outcome
    secs: tuple[float, ...] = ()
    max_error: float | None = None
    early: bool = False
    error: str = ""

_references: dict[str, dict] = {}  # reference path -> arrays, kept while the worker lives


def prepare(intrinsics: tuple[str, ...] | None) -> bool:
    """Worker start-up: TVM, the target's tensor intrinsics, the build passes."""
    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin(intrinsics)
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: F401

    return True


def build(mod, target, work_dir: str | None = None) -> tuple[str, str | None]:
    """Build a candidate as MetaSchedule's default builder does; returns the artifact (a tar
    that both the local and the RPC runners load), in a new folder under ``work_dir``, and a
    second artifact for checking it when the schedule rewrote a weight's layout.

    A schedule that copies a weight into another layout (MetaSchedule's RewriteLayout, schedx's
    default tiling of a model's weights) has it timed without the copy, as an export runs it (the
    export packs constant weights at build time): the timed kernel takes the weight already
    rewritten (random data will do for timing), so only the kernel with the copy still inside can
    run on the reference's weights."""
    import tvm
    from tvm.support.tar import tar

    from explorer.measure.run import without_layout_rewrites

    folder = tempfile.mkdtemp(prefix="schedx-build-", dir=work_dir)
    timed = without_layout_rewrites(mod)
    path = os.path.join(folder, "tvm_tmp_mod." + tar.output_format)
    tvm.build(timed if timed is not None else mod, target=target).export_library(path, fcompile=tar)
    if timed is None:
        return path, None
    check = os.path.join(folder, "check." + tar.output_format)
    tvm.build(mod, target=target).export_library(check, fcompile=tar)
    return path, check


def reference(mod, target, specs: ArgSpecs, path: str, seed: int = 0) -> str:
    """Run the unscheduled ``mod`` once on seeded inputs on this machine's CPU (``target``: an
    LLVM target); save inputs and outputs to ``path``."""
    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array
    from explorer.measure.memory import buffer_bytes, check_memory, measure_bytes

    check_memory(measure_bytes(*buffer_bytes(specs)), "the task's reference")  # here, before allocating
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

    from search.errors import InfrastructureError

    try:
        tracker = tvm_rpc.connect_tracker(rpc["host"], rpc["port"])
        session = tracker.request(rpc["key"], priority=0, session_timeout=rpc.get("session_timeout", 60))
    except Exception as err:
        raise InfrastructureError(f"no RPC device with key {rpc['key']!r} from the tracker at "
                                  f"{rpc['host']}:{rpc['port']}: {err}") from err
    session.upload(artifact_path)
    return session.load_module(os.path.basename(artifact_path)), session.device(device, 0)


def _run_once(rt_mod, dev, args) -> float:
    """Seconds of one call of the module's entry, as the host sees it."""
    import time

    start = time.perf_counter()
    rt_mod[rt_mod.entry_name](*args)
    dev.sync()
    return time.perf_counter() - start


def measure(artifact_path: str, specs: ArgSpecs, evaluator: dict, reference_path: str | None,
            reject_above_s: float | None = None, rpc: dict | None = None, device: str = "cpu",
            check_path: str | None = None, reference_specs: ArgSpecs | None = None) -> Timed:
    """Load a built candidate (here, or on a device of the RPC tracker ``rpc``: host, port,
    key), check its outputs against the reference (when there is one), then time it as
    MetaSchedule's runners do (``evaluator``: ``number``, ``repeat``, ``min_repeat_ms``, and on a
    CPU an optional ``f_preproc`` run before each repeat: the confirmation round's cache flush). ``specs`` are the timed kernel's arguments; when a schedule
    rewrote a weight's layout, ``check_path`` is the kernel that still takes the task's
    arguments (``reference_specs``) and is what runs on the reference. A candidate whose first
    run already took longer than ``reject_above_s`` keeps that one run as its time (``"early":
    True``) instead of being timed again and again: it cannot win."""
    import numpy as np
    import tvm

    from explorer.kernels.kernel import random_array
    from explorer.measure.memory import MemoryLimitError, buffer_bytes, check_memory, search_bytes
    from explorer.measure.verify import compare
    from search.errors import InfrastructureError

    try:  # the machine's limit, not the candidate's fault: an infra_error, measured again on resume
        check_memory(search_bytes(*buffer_bytes(reference_specs or specs)), "checking and timing a candidate")
    except MemoryLimitError as err:
        raise InfrastructureError(str(err)) from None

    def load(path):
        return _remote(path, rpc, device) if rpc else (tvm.runtime.load_module(path), tvm.runtime.device(device, 0))

    rt_mod, dev = load(artifact_path)
    max_error, once, args = None, None, None
    if reference_path:
        ref = _load_reference(reference_path)
        check_specs = reference_specs or specs
        check_mod, check_dev = load(check_path) if check_path else (rt_mod, dev)
        check_args = [tvm.runtime.tensor(ref[f"a{i}"], check_dev) for i in range(len(check_specs))]
        once = _run_once(check_mod, check_dev, check_args)
        outs = [i for i, spec in enumerate(check_specs) if spec[2]]
        ok, max_error, _, why = compare([check_args[i].numpy() for i in outs], [ref[f"e{i}"] for i in outs])
        if not ok:
            return Timed(Outcome.VERIFY_FAILED, max_error=max_error, error=why)
        if not check_path:
            args = check_args
    if args is None:
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(random_array(shape, dtype, rng), dev) for shape, dtype, _ in specs]
    if reject_above_s is not None and not check_path:
        if once is None:
            once = _run_once(rt_mod, dev, args)
        if once > reject_above_s:
            return Timed(Outcome.OK, (once,), max_error, early=True)
    flush = evaluator.get("f_preproc", "")  # (a search measures CPUs only: the flush is a CPU's)
    timer = rt_mod.time_evaluator(rt_mod.entry_name, dev, number=evaluator["number"], repeat=evaluator["repeat"],
                                  min_repeat_ms=evaluator["min_repeat_ms"], f_preproc=flush)
    dev.sync()
    return Timed(Outcome.OK, tuple(float(x) for x in timer(*args).results), max_error)
