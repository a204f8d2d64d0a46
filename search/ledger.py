"""The candidate ledger: what a search knows about each candidate, in one typed place that the
builder, the runner and the callbacks share.

MetaSchedule hands a batch from its builder to its runner and then to its measure callbacks,
each seeing only artifact paths and error strings. schedx needs more per candidate: which task it
schedules (to check it against that task's reference), whether the store already measured it
(true resume: neither built nor run again), the second artifact that verifies a schedule that
rewrote a weight's layout, and how it ended (a :class:`store.Outcome`, never guessed from the
text of an error). :class:`LedgerBuilder` and :class:`LedgerRunner` are the builder and runner
MetaSchedule sees; they keep the ledger and delegate the work:

- to a :class:`CandidateBuilder` / :class:`CandidateRunner` (schedx's warm pool, which reports
  typed outcomes), or
- to any plain MetaSchedule builder or runner (tests' deterministic fakes, MetaSchedule's own),
  whose failures become ``build_error`` / ``run_error``.

Not thread-safe for writers: MetaSchedule drives builder, runner and callbacks from one thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from explorer.workload import module_hash, task_tag
from store.outcome import Outcome


@dataclass
class Candidate:
    """One candidate of a batch, from proposal to record."""

    hash: str  # the scheduled module's structural hash (what resume looks up)
    task: int | None  # index of the task it schedules
    cached: str | None = None  # the store's record id when it was measured before
    artifact: str | None = None
    check_artifact: str | None = None  # the kernel with its weight transform inside, to verify it
    status: Outcome | None = None  # None until it is built and run (or found measured)
    error: str = ""
    secs: tuple[float, ...] = ()
    max_error: float | None = None
    verified: bool | None = None
    early: bool = False  # timed by one run only: far slower than the task's best

    def fail(self, status: Outcome, error: str) -> None:
        self.status, self.error = status, error or f"{status} (no message)"


@dataclass(frozen=True)
class BuildOutcome:
    """What a :class:`CandidateBuilder` reports for one candidate."""

    status: Outcome  # OK, BUILD_ERROR, TIMEOUT, INFRA_ERROR
    artifact: str | None = None
    check_artifact: str | None = None
    error: str = ""


@dataclass(frozen=True)
class RunOutcome:
    """What a :class:`CandidateRunner` reports for one candidate."""

    status: Outcome  # OK, RUN_ERROR, VERIFY_FAILED, TIMEOUT, INFRA_ERROR
    secs: tuple[float, ...] = ()
    error: str = ""
    max_error: float | None = None
    verified: bool | None = None
    early: bool = False


class CandidateBuilder:
    """A builder that reports typed outcomes (see :class:`search.builder.FastBuilder`)."""

    def build_candidates(self, inputs: list, candidates: list[Candidate]) -> list[BuildOutcome]:
        raise NotImplementedError


class CandidateRunner:
    """A runner that reports typed outcomes (see :class:`search.runner.PoolRunner`)."""

    def run_candidates(self, inputs: list, candidates: list[Candidate]) -> list[RunOutcome]:
        raise NotImplementedError


class CandidateLedger:
    """Candidates of a search by hash and by artifact, and what the store measured before."""

    def __init__(self, task_index: dict[str, int], known: dict[str, tuple[str, list[float]]] | None = None) -> None:
        self.task_index = task_index  # workload key -> task index (candidates carry the key as a tag)
        self.known: dict[str, tuple[str, list[float]]] = dict(known or {})  # hash -> (record id, latencies)
        self._by_hash: dict[str, Candidate] = {}
        self._by_artifact: dict[str, Candidate] = {}

    def propose(self, mod) -> Candidate:
        """A candidate as the builder receives it: its task and whether the store has it."""
        h = module_hash(mod)
        c = Candidate(hash=h, task=self.task_index.get(task_tag(mod) or ""))
        if h in self.known:
            c.cached = self.known[h][0]
            c.status, c.secs = Outcome.OK, tuple(self.known[h][1])
        self._by_hash[h] = c
        return c

    def built(self, c: Candidate, outcome: BuildOutcome) -> None:
        if outcome.status == Outcome.OK and outcome.artifact:
            c.artifact, c.check_artifact = outcome.artifact, outcome.check_artifact
            self._by_artifact[outcome.artifact] = c
        else:
            c.fail(outcome.status, outcome.error)

    def answered(self, c: Candidate, path: str) -> None:
        """A cached candidate travels to the runner under ``path`` (nothing is built)."""
        c.artifact = path
        self._by_artifact[path] = c

    def by_artifact(self, path: str) -> Candidate | None:
        return self._by_artifact.get(path)

    def ran(self, c: Candidate, outcome: RunOutcome) -> None:
        c.max_error, c.verified, c.early = outcome.max_error, outcome.verified, outcome.early
        if outcome.status == Outcome.OK:
            c.status, c.secs = Outcome.OK, tuple(outcome.secs)
        else:
            c.fail(outcome.status, outcome.error)

    def settle(self, mod) -> Candidate:
        """The candidate a callback turns into a record (forgotten by the ledger afterwards)."""
        h = module_hash(mod)
        c = self._by_hash.pop(h, None) or Candidate(hash=h, task=self.task_index.get(task_tag(mod) or ""))
        if c.artifact:
            self._by_artifact.pop(c.artifact, None)
        return c

    def remember(self, candidate_hash: str, record_id: str, latencies: list[float]) -> None:
        """A candidate now in the store: a later batch (or a resumed search) answers it from there."""
        self.known[candidate_hash] = (record_id, list(latencies))


def cached_path(c: Candidate, work_dir: str) -> str:
    """The artifact path MetaSchedule carries for a candidate that is not built (answered from the
    store): a name under the work folder that no file has."""
    return os.path.join(work_dir, f"cached-{c.hash}")


@derived_object
class _Done(ms.runner.PyRunnerFuture):
    def __init__(self, result: ms.runner.RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> ms.runner.RunnerResult:
        return self._result


@derived_object
class LedgerBuilder(ms.builder.PyBuilder):
    """The builder MetaSchedule sees: proposes every candidate to the ledger, builds only new ones
    with ``inner`` (a :class:`CandidateBuilder` or a MetaSchedule builder)."""

    def __init__(self, inner, ledger: CandidateLedger, work_dir: str) -> None:
        super().__init__()
        self.inner, self.ledger, self.work_dir = inner, ledger, work_dir

    def build(self, build_inputs: list) -> list:
        candidates = [self.ledger.propose(inp.mod) for inp in build_inputs]
        todo = [i for i, c in enumerate(candidates) if c.cached is None]
        inputs = [build_inputs[i] for i in todo]
        if not todo:
            outcomes = []
        elif isinstance(self.inner, CandidateBuilder):
            outcomes = self.inner.build_candidates(inputs, [candidates[i] for i in todo])
        else:
            outcomes = [BuildOutcome(Outcome.OK, str(r.artifact_path)) if r.error_msg is None and r.artifact_path else
                        BuildOutcome(Outcome.BUILD_ERROR, error=str(r.error_msg or "no artifact"))
                        for r in self.inner.build(inputs)]
        for i, outcome in zip(todo, outcomes):
            self.ledger.built(candidates[i], outcome)
        results = []
        for c in candidates:
            if c.cached is not None:
                self.ledger.answered(c, cached_path(c, self.work_dir))
                results.append(ms.builder.BuilderResult(c.artifact, None))
            elif c.artifact:
                results.append(ms.builder.BuilderResult(c.artifact, None))
            else:
                results.append(ms.builder.BuilderResult(None, c.error))
        return results


@derived_object
class LedgerRunner(ms.runner.PyRunner):
    """The runner MetaSchedule sees: answers cached candidates from the store's latencies, runs
    new ones with ``inner`` (a :class:`CandidateRunner` or a MetaSchedule runner)."""

    def __init__(self, inner, ledger: CandidateLedger, work_dir: str) -> None:
        super().__init__()
        self.inner, self.ledger, self.work_dir = inner, ledger, work_dir

    def run(self, runner_inputs: list) -> list:
        out: list = [None] * len(runner_inputs)
        fresh, fresh_candidates = [], []
        for i, inp in enumerate(runner_inputs):
            c = self.ledger.by_artifact(str(inp.artifact_path))
            if c is not None and c.cached is not None:
                out[i] = _Done(ms.runner.RunnerResult(list(c.secs), None) if c.secs else
                               ms.runner.RunnerResult(None, "cached candidate without a latency"))
            else:
                fresh.append(i)
                fresh_candidates.append(c)
        if not fresh:
            return out
        inputs = [runner_inputs[i] for i in fresh]
        if isinstance(self.inner, CandidateRunner):
            outcomes = self.inner.run_candidates(inputs, fresh_candidates)
        else:
            outcomes = [_plain_run(f) for f in self.inner.run(inputs)]
        for i, c, outcome in zip(fresh, fresh_candidates, outcomes):
            if c is not None:
                self.ledger.ran(c, outcome)
            out[i] = _Done(ms.runner.RunnerResult(list(outcome.secs), None) if outcome.status == Outcome.OK else
                           ms.runner.RunnerResult(None, outcome.error or outcome.status))
        return out


def _plain_run(future) -> RunOutcome:
    r = future.result() if hasattr(future, "result") else future
    if r.error_msg is None and r.run_secs:
        return RunOutcome(Outcome.OK, tuple(float(s) for s in r.run_secs))
    return RunOutcome(Outcome.RUN_ERROR, error=str(r.error_msg or "no run time"))


__all__ = ["BuildOutcome", "Candidate", "CandidateBuilder", "CandidateLedger", "CandidateRunner", "LedgerBuilder",
           "LedgerRunner", "RunOutcome", "cached_path"]
