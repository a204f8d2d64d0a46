"""The search strategy schedx hands MetaSchedule: its own ``EvolutionarySearch``, wrapped so that
a stop request ends the search at a batch boundary (see :mod:`search.stopping`)."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from search.stopping import StopRequest


@derived_object
class StoppableSearch(ms.search_strategy.PySearchStrategy):
    """A MetaSchedule search strategy (``inner``, e.g. ``EvolutionarySearch``) that proposes
    nothing more once ``stop`` is set: MetaSchedule then ends the task as one whose search space
    is used up, at a batch boundary, without an exception crossing C++."""

    def __init__(self, inner, stop: StopRequest) -> None:
        super().__init__()
        self.inner, self.stop = inner, stop

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.stop.batch_starting():
            return None
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return StoppableSearch(self.inner.clone(), self.stop)


__all__ = ["StoppableSearch"]
