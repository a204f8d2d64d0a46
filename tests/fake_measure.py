"""Deterministic fake builder and runner: search logic without compiling or timing anything.

Plain MetaSchedule builder and runner (no schedx protocol to imitate: the search's ledger wraps
them). The builder 'builds' a candidate into a name carrying its structural hash; the runner
turns the hash into a latency, so the same candidate always gets the same time, and one in
``fail_every`` fails to run."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from explorer.workload import module_hash


@derived_object
class FakeBuilder(ms.builder.PyBuilder):
    def __init__(self) -> None:
        super().__init__()
        self.built: list[str] = []

    def build(self, build_inputs):
        out = []
        for inp in build_inputs:
            h = module_hash(inp.mod)
            self.built.append(h)
            out.append(ms.builder.BuilderResult(f"fake:{h}", None))
        return out


@derived_object
class DoneFuture(ms.runner.PyRunnerFuture):
    """A runner future that is done already, holding ``result``: what the fake runners return."""

    def __init__(self, result) -> None:
        super().__init__()
        self._r = result

    def done(self) -> bool:
        return True

    def result(self):
        return self._r


@derived_object
class FakeRunner(ms.runner.PyRunner):
    def __init__(self, fail_every: int = 0) -> None:
        super().__init__()
        self.fail_every = fail_every
        self.ran: list[str] = []

    def run(self, runner_inputs):
        out = []
        for inp in runner_inputs:
            h = str(inp.artifact_path).split(":", 1)[1]
            self.ran.append(h)
            if self.fail_every and int(h) % self.fail_every == 0:
                out.append(DoneFuture(ms.runner.RunnerResult(None, "fake runner: this candidate crashed")))
            else:
                out.append(DoneFuture(ms.runner.RunnerResult([1e-4 * (1 + int(h) % 997 / 100.0)], None)))
        return out


@derived_object
class LuckyRunner(ms.runner.PyRunner):
    """The winner's curse on demand: the first candidate it runs (a search's default schedule)
    always takes ``default_s``; every other one is timed ``lucky_s`` the first time it runs and
    ``true_s`` afterwards (a lucky single timing, then what it really takes)."""

    def __init__(self, default_s: float = 1e-4, lucky_s: float = 5e-5, true_s: float = 2e-4) -> None:
        super().__init__()
        self.default_s, self.lucky_s, self.true_s = default_s, lucky_s, true_s
        self.ran: list[str] = []

    def run(self, runner_inputs):
        out = []
        for inp in runner_inputs:
            h = str(inp.artifact_path).split(":", 1)[1]
            first = self.ran[0] if self.ran else h
            secs = self.default_s if h == first else self.true_s if h in self.ran else self.lucky_s
            self.ran.append(h)
            out.append(DoneFuture(ms.runner.RunnerResult([secs], None)))
        return out
