"""Search parameters as one frozen value, checked before any work starts."""

from __future__ import annotations

from dataclasses import dataclass

from search.errors import SearchError
from store.values import DictValue

UNLIMITED_TRIALS = 10_000_000  # a time budget (minutes) without a trial limit: the clock decides


@dataclass(frozen=True)
class SearchParams(DictValue):
    """Evolutionary search (Ansor/MetaSchedule) knobs, with MetaSchedule's names in comments."""

    trials: int = 64  # max_trials_global
    per_batch: int = 16  # num_trials_per_iter: candidates measured per batch
    population: int = 256  # population_size
    generations: int = 3  # genetic_num_iters
    mutate_prob: float = 0.85  # genetic_mutate_prob
    max_fail_count: int = 10  # genetic_max_fail_count
    init_measured_ratio: float = 0.2  # share of the initial population taken from measured records
    init_min_unmeasured: int = 50
    eps_greedy: float = 0.05  # share of each batch picked at random instead of by the cost model
    seed: int = 0
    cost_model: str = "xgb"  # "xgb" or "random"
    task_scheduler: str = "gradient"  # "gradient" or "round-robin" (whole models)
    builder_workers: int = 0  # 0: one per core
    timeout_s: int = 30  # per build and per run
    minutes: float = 0.0  # time budget: stop after the batch in progress once it is spent (0: none)
    defaults_first: bool = True  # measure each task's default schedule first: the baseline a record must beat
    # then up to this many variants of each task's default (the default rules with one choice changed:
    # explorer.schedule.defaults.variants), heaviest tasks first, at most half the trials (0: none)
    default_variants: int = 3
    # candidates timed as a model runs them: every argument but the input flushed from the cache before
    # each of 10 single runs (search.runner.COLD_EVALUATOR), so that the cost model learns those times;
    # False: MetaSchedule's warm timing (runs back to back for 40 ms, the weights staying in the cache)
    cold_timing: bool = True
    # also tile fp32 blocks around an FMA micro-kernel for the target's vector width
    # (explorer.schedule.microkernel); blocks it cannot tensorize keep the default rules
    microkernel: bool = False
    # after the search, each task's best schedules and its default timed again in turns, this many
    # rounds (search.confirm_round): what an export applies is decided there (0: not confirmed)
    confirm_rounds: int = 3

    @property
    def by_time(self) -> bool:
        """The budget is the clock (``minutes`` with no trial limit)."""
        return bool(self.minutes) and self.trials >= UNLIMITED_TRIALS

    def limit(self, total: int | None = None) -> str:
        """The budget in words: ``64`` (trials; ``total`` when the job counted its own), ``5 min``."""
        return f"{self.minutes:g} min" if self.by_time else str(total or self.trials)

    def budget(self, done: int, total: int | None = None) -> str:
        """``done`` trials against the budget: ``12/64``, or ``12/5 min`` for a time budget."""
        return f"{done}/{self.limit(total)}"

    def __post_init__(self) -> None:
        checks = [
            (self.trials > 0, f"trials must be positive, got {self.trials}"),
            (self.per_batch > 0, f"per_batch must be positive, got {self.per_batch}"),
            (self.population >= 2, f"population must be at least 2, got {self.population}"),
            (self.generations >= 0, f"generations cannot be negative, got {self.generations}"),
            (0 <= self.mutate_prob <= 1, f"mutate_prob must be in [0, 1], got {self.mutate_prob}"),
            (0 <= self.eps_greedy <= 1, f"eps_greedy must be in [0, 1], got {self.eps_greedy}"),
            (0 <= self.init_measured_ratio <= 1, f"init_measured_ratio must be in [0, 1], got {self.init_measured_ratio}"),
            (self.cost_model in ("xgb", "random"), f"cost_model must be xgb or random, got {self.cost_model!r}"),
            (self.task_scheduler in ("gradient", "round-robin"),
             f"task_scheduler must be gradient or round-robin, got {self.task_scheduler!r}"),
            (0 <= self.default_variants <= 6, f"default_variants must be in [0, 6], got {self.default_variants}"),
            (0 <= self.confirm_rounds <= 50, f"confirm_rounds must be in [0, 50], got {self.confirm_rounds}"),
            (self.timeout_s > 0, f"timeout_s must be positive, got {self.timeout_s}"),
            (self.timeout_s <= 24 * 3600, f"timeout_s must be at most a day (86400), got {self.timeout_s}"),
            (0 <= self.minutes <= 7 * 24 * 60, f"minutes must be in [0, 10080] (a week), got {self.minutes}"),
        ]
        for ok, message in checks:
            if not ok:
                raise SearchError(message)
