"""Building candidates in schedx's warm worker pool.

MetaSchedule's ``LocalBuilder`` creates a fresh process pool for every batch and its default
build function imports every tensor intrinsic TVM ships (about 20 s): with a 15 s timeout every
build of a 512 matmul timed out here. ``FastBuilder`` builds in the search's
:class:`search.pool.WarmPool` (started once, TVM already imported, only the target's intrinsics)
exactly as the default does (RemoveWeightLayoutRewriteBlock, then ``tvm.build``, exported as a
tar the local and RPC runners both load). It is a :class:`search.ledger.CandidateBuilder`: the
ledger's builder hands it only candidates the store has not measured, and it reports typed
outcomes, with the second artifact that verifies a schedule that rewrote a weight's layout.
"""

from __future__ import annotations

from search.ledger import BuildOutcome, Candidate, CandidateBuilder
from search.pool import WarmPool
from search.worker_jobs import build as build_job
from store.outcome import Outcome


class FastBuilder(CandidateBuilder):
    """Builds candidates in a warm worker pool (see the module docstring)."""

    def __init__(self, pool: WarmPool, *, timeout_sec: float = 60.0, work_dir: str | None = None) -> None:
        self.pool = pool
        self.work_dir = work_dir  # artifacts go under it (a search removes it at the end)
        self.timeout_sec = timeout_sec

    def build_candidates(self, inputs: list, candidates: list[Candidate]) -> list[BuildOutcome]:
        jobs = [(inp.mod, inp.target, self.work_dir) for inp in inputs]
        out = []
        for result in self.pool.map(build_job, jobs, timeout=self.timeout_sec, failed=Outcome.BUILD_ERROR):
            out.append(BuildOutcome(Outcome.OK, *result.value) if result.ok else
                       BuildOutcome(result.status, error=result.message))
        return out
