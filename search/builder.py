"""A MetaSchedule builder that starts once and stays warm.

MetaSchedule's ``LocalBuilder`` creates a fresh process pool for every batch and its default
build function imports every tensor intrinsic TVM ships (about 20 s): with a 15 s timeout every
build of a 512 matmul timed out here. ``FastBuilder`` keeps one pool for the whole search,
registers only the target's intrinsics in each worker (see :mod:`explorer.tvm_fast`), and
builds exactly as the default does (RemoveWeightLayoutRewriteBlock, then ``tvm.build``,
exported as a tar the local and RPC runners both load).

A candidate already measured (see :class:`search.runner.CachingRunner`) is not built at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from tvm.s_tir import meta_schedule as ms
from tvm.ir.utils import derived_object
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

CACHED_PREFIX = "schedx-cached:"


def _init_worker(target_kind: str) -> None:
    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin(target_kind)


def _warm_up() -> bool:
    import tvm  # noqa: F401
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: F401

    return True


def _build_worker(job: tuple) -> str:
    mod, target = job
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm.build(mod, target=target) if hasattr(tvm, "build") else tvm.compile(mod, target=target)
    path = os.path.join(tempfile.mkdtemp(prefix="schedx-build-"), "tvm_tmp_mod." + tar.output_format)
    rt_mod.export_library(path, fcompile=tar)
    return path


@derived_object
class FastBuilder(ms.builder.PyBuilder):
    """Builds candidates in a persistent process pool (see the module docstring)."""

    def __init__(self, *, max_workers: int | None = None, timeout_sec: float = 60.0, target_kind: str = "llvm",
                 known: Callable[[object], str | None] | None = None) -> None:
        super().__init__()
        self.timeout_sec = timeout_sec
        self.known = known
        self.workers = max_workers or max(1, (os.cpu_count() or 2))
        self.pool = PopenPoolExecutor(max_workers=self.workers, timeout=timeout_sec, initializer=_init_worker,
                                      initargs=(target_kind,))
        # Start the workers now: they import TVM while the search generates its first batch.
        self._warm = [self.pool.submit(_warm_up) for _ in range(self.workers)]

    def build(self, build_inputs: list) -> list:
        results: list = [None] * len(build_inputs)
        todo = []
        for i, inp in enumerate(build_inputs):
            cached = self.known(inp.mod) if self.known is not None else None
            if cached is not None:
                results[i] = ms.builder.BuilderResult(CACHED_PREFIX + cached, None)
            else:
                todo.append(i)
        outcomes = self.pool.map_with_error_catching(
            _build_worker, [(build_inputs[i].mod, build_inputs[i].target) for i in todo])
        for i, outcome in zip(todo, outcomes):
            if outcome.status == StatusKind.COMPLETE:
                results[i] = ms.builder.BuilderResult(str(outcome.value), None)
            elif outcome.status == StatusKind.TIMEOUT:
                results[i] = ms.builder.BuilderResult(None, f"build timed out after {self.timeout_sec:.0f} s")
            else:
                results[i] = ms.builder.BuilderResult(None, f"build failed: {outcome.value}")
        return results

    def close(self) -> None:
        self.pool.shutdown()
