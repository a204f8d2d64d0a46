"""A MetaSchedule builder on schedx's warm worker pool.

MetaSchedule's ``LocalBuilder`` creates a fresh process pool for every batch and its default
build function imports every tensor intrinsic TVM ships (about 20 s): with a 15 s timeout every
build of a 512 matmul timed out here. ``FastBuilder`` builds in the search's
:class:`search.pool.WarmPool` (started once, TVM already imported, only the target's intrinsics)
exactly as the default does (RemoveWeightLayoutRewriteBlock, then ``tvm.build``, exported as a
tar the local and RPC runners both load).

A candidate already measured (see :class:`search.runner.CachingRunner`) is not built at all.
The builder also notes which task each artifact belongs to (``task_of``), so that the runner
can check the candidate against that task's reference.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from search.pool import WarmPool, failure
from search.worker_jobs import build as build_job

CACHED_PREFIX = "schedx-cached:"


@derived_object
class FastBuilder(ms.builder.PyBuilder):
    """Builds candidates in a warm worker pool (see the module docstring)."""

    def __init__(self, pool: WarmPool, *, timeout_sec: float = 60.0, work_dir: str | None = None,
                 known: Callable[[object], str | None] | None = None,
                 task_of: Callable[[object], int | None] | None = None) -> None:
        super().__init__()
        self.pool = pool
        self.work_dir = work_dir  # artifacts go under it (a search removes it at the end)
        self.timeout_sec = timeout_sec
        self.known = known
        self.task_of = task_of
        self.artifact_task: dict[str, int] = {}  # artifact path -> task index, read by the runner
        self.check_artifact: dict[str, str] = {}  # artifact path -> the same kernel with its weight transform

    def build(self, build_inputs: list) -> list:
        results: list = [None] * len(build_inputs)
        todo = []
        for i, inp in enumerate(build_inputs):
            cached = self.known(inp.mod) if self.known is not None else None
            if cached is not None:
                results[i] = ms.builder.BuilderResult(CACHED_PREFIX + cached, None)
            else:
                todo.append(i)
        jobs = [(build_inputs[i].mod, build_inputs[i].target, self.work_dir) for i in todo]
        outcomes = self.pool.map(build_job, jobs, timeout=self.timeout_sec)
        for i, outcome in zip(todo, outcomes):
            if outcome.ok:
                path, check = outcome.value
                results[i] = ms.builder.BuilderResult(path, None)
                task = self.task_of(build_inputs[i].mod) if self.task_of is not None else None
                if task is not None:
                    self.artifact_task[path] = task
                if check is not None:
                    self.check_artifact[path] = check
            elif outcome.status == "timeout":
                results[i] = ms.builder.BuilderResult(None, f"build timed out after {self.timeout_sec:.0f} s")
            else:
                results[i] = ms.builder.BuilderResult(None, failure("build failed: ", outcome))
        return results
