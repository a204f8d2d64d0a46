"""Keep a record only where its kernel is faster *inside the model* than the default schedule.

A search (and its confirmation round) times each kernel alone; in the model the kernels before it
leave the caches in another state. A record that reads a weight in a layout the cache favours
when it is called alone can lose in place: after a 10-minute search with its confirmation round,
MobileNetV2 (AVX2, 2 cores) ran 8.50 ms with its 4 records and 7.91 ms with none, in one run.

:func:`check_in_model` builds the model twice (the records applied, and the defaults only), runs
each bundle in a fresh process with the VM's per-call instrument (:mod:`export.profile`), in
alternated rounds, and keeps a task's record only when its kernel is faster in place by
:data:`MARGIN` in the median round: each round times both builds one after the other, so the
ratio of the two is taken round by round, and the median ignores one odd round either way. The
best of the rounds alone let noise through: after a 20-minute ResNet-18 search one record kept on
a 2% lead (2.68 ms for a conv's two calls) lost in the benchmark's own rounds, and the tuned model
ran 1.07x ONNX Runtime where its defaults ran 1.02x. Requiring a win in every round instead dropped
a record 35% faster at its best that lost one round (MobileNetV2 after a one-hour search,
0.176 against 0.273 ms). (AVX2, 2 cores.) Two builds and ``2 * rounds`` profiled runs: 48 s for
ResNet-18 and 47 s for MobileNetV2 on 2 cores.

Kernels that each win in place can still leave the model no faster: after a 10-minute ResNet-18
search (AVX-512 Zen 5, 2 cores) 10 records won kernel by kernel, "saving" 1.08 ms of 8.8 by their
cold timings, and the model ran 1.01x its defaults (95% CI 1.00-1.02). So the records kept are
then timed together, the whole model in plain runs against the defaults in alternated rounds
(about 20 s), and kept only when the model is faster beyond the noise: an export never ships a
set of records that does not make the model faster.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explorer.target import Target
from explorer.temp_dirs import private_temp_dir
from explorer.workload import Workload
from export.schedules import TaskOutcome, TaskSchedule


@dataclass(frozen=True)
class InModelCheck:
    """Per task with a record: its kernel's seconds per run in the model with the record and with
    the default (the best of the rounds), and whether the record was kept."""

    rounds: int
    # the whole model with the records kept against the defaults, plain runs in alternated rounds:
    # {"ratio", "low", "high" (95% interval of the ratio of medians), "verdict" (faster, same,
    # slower), "records" (how many were kept before it)}; empty when no record was kept
    whole: dict = field(default_factory=dict)
    # task name -> {"record_s", "default_s" (best of the rounds), "ratio" (the record's time over
    # the default's in the median round; None unless every round saw both), "rounds_won" (rounds
    # in which the record's kernel was the faster), "verdict": kept, dropped, failed or unchecked,
    # "kept", "error": why a failed record did not apply}
    tasks: dict = field(default_factory=dict)

    @property
    def kept(self) -> list[str]:
        return [name for name, t in self.tasks.items() if t["kept"]]

    @property
    def dropped(self) -> list[str]:
        return [name for name, t in self.tasks.items() if not t["kept"]]

    def notes(self) -> list[str]:
        """One warning per record dropped, saying why (for an export's manifest)."""
        out = []
        if self.whole and self.whole["verdict"] != "faster":
            w = self.whole
            out.append(f"the {w['records']} record(s) that won kernel by kernel did not make the whole model faster "
                       f"beyond the noise (its time {w['ratio']:.2f}x the defaults', 95% CI {w['low']:.2f}-"
                       f"{w['high']:.2f}): the default schedules are used")
        for name in self.dropped:
            t = self.tasks[name]
            if t["verdict"] == "whole":  # said once, above
                continue
            out.append(f"{name}: its record does not apply ({t['error'][:200]}): the default is used"
                       if t["verdict"] == "failed" else
                       f"{name}: its record ran {t['record_s'] * 1e3:.3f} ms inside the model against the default's "
                       f"{t['default_s'] * 1e3:.3f} ms ({self._lead(t)}): the default is used")
        return out

    def _lead(self, t: dict) -> str:
        if t["ratio"] is None:
            return "not seen in every round"
        return f"{t['ratio']:.2f}x the default's time in the median round, faster in {t['rounds_won']} of {self.rounds}"

    def to_dict(self) -> dict:
        return {**asdict(self), "kept": self.kept, "dropped": self.dropped}

    @classmethod
    def from_dict(cls, data: dict) -> InModelCheck:
        """A check read back from :meth:`to_dict`'s JSON (a decision kept in the store)."""
        return cls(rounds=int(data.get("rounds", 0)), whole=dict(data.get("whole") or {}),
                   tasks=dict(data.get("tasks") or {}))


def _kernel_seconds(child: dict, funcs) -> float | None:
    calls = child["profile"]["calls"]
    found = [calls[f]["seconds"] for f in funcs if f in calls]
    return sum(found) if found else None


# A record must beat the default by this factor in place: closer than that is noise, and the
# default (built from the rules, weights packed at build time) is the safer of two equals.
MARGIN = 0.98


def _compare(record: list[float | None], default: list[float | None], rounds: int
             ) -> tuple[float | None, int, str]:
    """A kernel's seconds in each round with the record and with the default (None: a round where
    the instrument missed it) as: the record's time over the default's in the median round (None
    unless every one of the ``rounds`` saw it in both builds), the rounds the record won, and the
    verdict: kept (the median round below :data:`MARGIN`), dropped (a missed round drops it too),
    or unchecked (the instrument never saw the kernel)."""
    pairs = [(a, b) for a, b in zip(record, default) if a is not None and b is not None and b > 0]
    won = sum(a < b for a, b in pairs)
    if all(s is None for s in record) or all(s is None for s in default):
        return None, won, "unchecked"
    ratio = statistics.median(a / b for a, b in pairs) if len(pairs) == rounds >= 1 else None
    return ratio, won, "kept" if ratio is not None and ratio < MARGIN else "dropped"


def check_in_model(workload: Workload, target: Target, schedules: Mapping[str, TaskSchedule], *,
                   rounds: int = 3, runs: int = 10, threads: int | None = None
                   ) -> tuple[dict[str, TaskSchedule], InModelCheck]:
    """The ``schedules`` (keyed by task name or workload key, as an export takes them) whose kernel
    beats the default inside the model, keyed by task name, and the check's figures. A record that
    does not apply is dropped (the export would build the default anyway); a task whose kernel the
    instrument did not see keeps its record, marked unchecked. A record is kept when its kernel's
    time over the default's, in the median round, is below :data:`MARGIN`, and the records kept
    so are kept together only when the whole model runs faster with them than with the defaults
    beyond the noise (plain runs, alternated rounds: :func:`_whole_model`); else none is."""
    from export import workload_tasks
    from export.flow import export_workload
    from export.schedules import pick
    from export.verify import run_in_child

    chosen = {t.name: s for t in workload_tasks(workload) if (s := pick(schedules, t)) is not None}
    if not chosen:
        return {}, InModelCheck(rounds=0)
    rounds = max(1, rounds)
    # a workload built at bf16 or int8 (explorer.precision.for_precision) is exported at that precision, as it is
    precision = getattr(getattr(workload, "precision", None), "name", "fp32")
    # build -> task -> the kernel's seconds in each round
    seconds: dict[str, dict[str, list[float | None]]] = {"record": {}, "default": {}}
    with private_temp_dir("schedx-in-model-") as tmp:
        built = {name: export_workload(workload, target, Path(tmp) / name, schedules=plan, verify=False, layers=False,
                                       threads=threads, nvcc=False, precision=precision)
                 for name, plan in (("record", chosen), ("default", None))}
        # each build's task of each record's kernel, by workload key: a bf16 build that computes a convolution
        # in fp32 after all (its kernel untiled: explorer.passes.bf16_conv_retry) numbers its kernels anew
        given = {t.name: t for t in workload_tasks(workload)}
        keys = {name: t.key for name, t in given.items()}
        of_key = {b: {o.task.key: o for o in built[b].built.outcomes} for b in built}
        outcomes = {name: of_key["record"].get(keys[name]) or TaskOutcome(
            given[name], "failed", error="the build with records has no such kernel (its convolution computed in "
                                         "fp32: its bf16 kernel could not be tiled)") for name in chosen}
        funcs = {b: {name: of_key[b][keys[name]].task.funcs for name in chosen
                     if outcomes[name].schedule == "record" and keys[name] in of_key[b]} for b in built}
        order = list(built)
        for r in range(rounds):
            for name in order if r % 2 == 0 else order[::-1]:  # neither build always goes first
                child = run_in_child(built[name].folder, threads=threads, runs=3, budget_s=60.0, profile=runs)
                for task, fs in funcs[name].items():  # None where the instrument missed the kernel this round
                    seconds[name].setdefault(task, []).append(_kernel_seconds(child, fs))
        tasks, kept = _per_kernel(chosen, seconds, outcomes, rounds)
        whole = {}
        if kept:  # the kept records together, against the defaults: the model as a user runs it
            folder = built["record"].folder if kept.keys() == chosen.keys() else \
                export_workload(workload, target, Path(tmp) / "kept", schedules=kept, verify=False, layers=False,
                                threads=threads, nvcc=False, precision=precision).folder
            whole = _whole_model(folder, built["default"].folder, threads, len(kept))
            if whole["verdict"] != "faster":
                for task in kept:
                    tasks[task].update(verdict="whole", kept=False)
                kept = {}
    return kept, InModelCheck(rounds=rounds, whole=whole, tasks=tasks)


# The whole-model comparison: alternated rounds of plain runs (no instrument), each contender in a
# fresh process per round, up to WHOLE_RUNS runs or WHOLE_BUDGET_S seconds in all. Rounds, not runs,
# carry the noise that matters (a process's own speed: export.noise.compare_rounds), so many short ones.
WHOLE_ROUNDS, WHOLE_RUNS, WHOLE_BUDGET_S = 8, 400, 8.0
# When those rounds leave it undecided with the records ahead, the same again once, every round
# decided together: on a noisy VM 8 rounds could not tell a model 7% faster (MobileNetV2 after a
# one-hour search, machine E: its records' kernels 0.57-0.76x the defaults' in place in every
# round, the model 0.931x, 95% CI 0.835-1.003, and nothing shipped). One second look at most, and
# only while the records are ahead: they ship when the interval over all the rounds is below 1.
WHOLE_MORE_ROUNDS = 8


def _whole_model(records: Path, defaults: Path, threads: int | None, count: int) -> dict:
    """The model with the ``count`` records kept against the defaults, decided under the noise
    (:func:`export.bench.alternate_rounds`, :func:`export.noise.compare_rounds`)."""
    from export.bench import alternate_rounds, bundle_contender
    from export.noise import compare_rounds

    contenders = {"records": bundle_contender(records, "records", threads=threads),
                  "defaults": bundle_contender(defaults, "defaults", threads=threads)}
    rounds = {name: [] for name in contenders}
    for more in (WHOLE_ROUNDS, WHOLE_MORE_ROUNDS):
        _, by_round = alternate_rounds(contenders, rounds=more, runs=WHOLE_RUNS, budget_s=WHOLE_BUDGET_S)
        for name, runs in by_round.items():
            rounds[name] += runs
        c = compare_rounds(rounds["records"], rounds["defaults"], a_name="records", b_name="defaults")
        if c.verdict != "same" or c.ratio >= 1.0:
            break
    return {"ratio": c.ratio, "low": c.low, "high": c.high, "verdict": c.verdict, "records": count,
            "rounds": len(rounds["records"])}


def _per_kernel(chosen: dict, seconds: dict, outcomes: dict, rounds: int) -> tuple[dict, dict]:
    """Each record's kernel against the default's, as the instrument timed them round by round:
    the figures per task, and the records whose kernel is faster in place."""
    tasks, kept = {}, {}
    for task, schedule in chosen.items():
        record, default = seconds["record"].get(task, []), seconds["default"].get(task, [])
        record_s = min((s for s in record if s is not None), default=None)
        default_s = min((s for s in default if s is not None), default=None)
        ratio, won, verdict = _compare(record, default, rounds)
        if outcomes[task].schedule != "record":
            verdict = "failed"  # the record does not apply: the export builds the default
        tasks[task] = {"record_s": record_s, "default_s": default_s, "ratio": ratio, "rounds_won": won,
                       "verdict": verdict,
                       "kept": verdict in ("kept", "unchecked"), "error": outcomes[task].error}
        if tasks[task]["kept"]:
            kept[task] = schedule
    return tasks, kept


__all__ = ["MARGIN", "InModelCheck", "check_in_model"]
