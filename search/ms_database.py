"""MetaSchedule's database interface over the schedx store, so a search writes straight into
the leaderboard and compiling with it picks the leaderboard's best records.

``StoreDatabase`` is what ``ms.tune_tir(..., database=...)``, ``ms.tir_integration.compile_tir``
and ``ms.relax_integration.compile_relax`` take. It is target- and hardware-aware where
MetaSchedule's own databases are not: ``query_*`` (what compiling uses) only returns records of
the target being compiled for, and ``get_top_k`` (what the search warm-starts from) only records
of this machine (``hardware``) and of ``target_filter`` when given; ``any_hardware=True`` lifts
the machine restriction. Workloads are keyed by MetaSchedule's structural hash (module equality
"structural", the default), so a plain ``database_workload.json`` and the store agree on keys.
"""

from __future__ import annotations

import json

from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord
from tvm.s_tir.meta_schedule.database import Workload as MSWorkload
from tvm.target import Target

from explorer.ir.plain import to_plain
from explorer.target import canonical_target
from explorer.workload import module_hash, untagged
from search.records import metaschedule_record, store_workload
from store import Record, Store


@derived_object
class StoreDatabase(PyDatabase):
    """A MetaSchedule database whose tables are the schedx store.

    ``store``: a :class:`store.Store` or a path. ``hardware``: this machine's fingerprint
    (``explorer.target.environment.hardware_fingerprint()``); records committed here carry it, and
    ``get_top_k`` returns only records measured on it unless ``any_hardware``. ``target_filter``:
    canonical target text that ``get_top_k``/``get_all_tuning_records`` keep to (pass the tuning
    target so a search never warm-starts from another target's records). Committed records get
    ``source`` and ``job_id``; ``environment`` defaults to this machine's for the record's target.

    It keeps MetaSchedule's database contract (``tests/test_store_ms_conformance.py`` runs the
    same suite over it, ``MemoryDatabase`` and ``JSONDatabase``):
    - a committed record comes back equal: trace, target, args_info and ``run_secs`` exactly as
      committed, failure markers (1e10) included; only ``run_secs=None`` comes back as ``[1e10]``;
    - ``get_top_k`` and ``query_tuning_record`` rank by MetaSchedule's rule: the MEAN of
      ``run_secs``, a failure marker counted as 1e10, records without one valid run left out;
    - a record whose trace is empty (the unscheduled function, timed) ranks like any other, as
      TVM's tests of a Python database (``PyDatabase``) expect: ``query`` returns it and compiling
      with it leaves the function as it is. (The C++ ``MemoryDatabase``/``JSONDatabase`` skip it.)
    schedx's own leaderboard (``Store.best``, ``Store.top_k``) ranks by the MEDIAN of the valid
    runs instead, so that one slow or failed repeat does not bury a good schedule: runs
    ``[1.1, 1.2, 600]`` lead the leaderboard over ``[1, 2, 3]`` but come second here. Records that
    failed schedx's verification against the unscheduled kernel never rank on either side.
    """

    def __init__(self, store: Store | str, *, hardware: str, target_filter: str | None = None,
                 source: str = "search", job_id: int | None = None, any_hardware: bool = False,
                 environment: dict | None = None) -> None:
        self.store = store if isinstance(store, Store) else Store(store)
        self.hardware = hardware
        self.target_filter = canonical_target(target_filter) if target_filter else None
        self.source = source
        self.job_id = job_id
        self.any_hardware = any_hardware
        self._environment = environment
        self._workloads: dict[str, MSWorkload] = {}  # key -> the Workload MetaSchedule got from us
        self._keys: dict[MSWorkload, str] = {}  # Workload object (by handle) -> key
        self._envs: dict[str, dict] = {}

    # workloads
    def _key_of(self, workload: MSWorkload) -> str:
        key = self._keys.get(workload)
        if key is None:
            key = module_hash(workload.mod)
            self._keys[workload] = key
        return key

    def _remember(self, key: str, workload: MSWorkload) -> MSWorkload:
        self._workloads[key] = workload
        self._keys[workload] = key
        return workload

    def has_workload(self, mod: IRModule) -> bool:
        key = module_hash(mod)
        return key in self._workloads or self.store.workload(key) is not None

    def commit_workload(self, mod: IRModule) -> MSWorkload:
        key = module_hash(mod)
        if key in self._workloads:
            return self._workloads[key]
        if self.store.workload(key) is None:
            self.store.add_workload(store_workload(untagged(mod), source=self.source), replace=False)
        return self._remember(key, MSWorkload(mod))

    def _ms_workload(self, key: str) -> MSWorkload | None:
        if key not in self._workloads:
            w = self.store.workload(key)
            if w is None or not w.mod_b64:
                return None
            self._remember(key, MSWorkload.from_json([w.key, w.mod_b64]))
        return self._workloads[key]

    # records
    def _env(self, target_text: str) -> dict:
        if self._environment is not None:
            return self._environment
        if target_text not in self._envs:
            from explorer.target.environment import current_environment, hardware_fingerprint

            env = current_environment(target_text).to_dict() if self.hardware == hardware_fingerprint() else {}
            self._envs[target_text] = {**env, "hardware": self.hardware}
        return self._envs[target_text]

    def commit_tuning_record(self, record: TuningRecord) -> None:
        key = self._key_of(record.workload)
        if key not in self._workloads and self.store.workload(key) is None:
            self.commit_workload(record.workload.mod)
        trace, run_secs, target, args_info = to_plain(record.as_json())
        target_text = canonical_target(target) if target else (self.target_filter or "")
        self.store.add_record(metaschedule_record(
            key, trace, run_secs, target_text, args_info, hardware=self.hardware, source=self.source,
            environment=self._env(target_text), job_id=self.job_id))

    def _to_tuning_record(self, r: Record, workload: MSWorkload) -> TuningRecord | None:
        target = json.loads(r.target) if r.target.lstrip().startswith("{") else None
        try:
            return TuningRecord.from_json([r.trace, r.ms_run_secs(), target, r.args_info], workload)
        except Exception:  # noqa: BLE001 - a trace this TVM cannot replay is not a candidate
            return None

    def _hardware(self) -> str | None:
        return None if self.any_hardware else self.hardware

    def get_top_k(self, workload: MSWorkload, top_k: int) -> list[TuningRecord]:
        if top_k <= 0:
            return []
        key = self._key_of(workload)
        found = self.store.top_k(key, self.target_filter, self._hardware(), top_k, with_trace=True, rank="mean")
        return [t for t in (self._to_tuning_record(r, workload) for r in found) if t is not None]

    def get_all_tuning_records(self) -> list[TuningRecord]:
        out = []
        for r in self.store.records(target=self.target_filter, hardware=self._hardware(), has_trace=True, order="id"):
            workload = self._ms_workload(r.workload_key)
            t = self._to_tuning_record(r, workload) if workload is not None else None
            if t is not None:
                out.append(t)
        return out

    def query_tuning_record(self, mod: IRModule, target: Target, workload_name: str | None = None
                            ) -> TuningRecord | None:
        """The best record (by MetaSchedule's mean) of ``mod`` for exactly ``target`` (and this
        machine unless any_hardware)."""
        key = module_hash(mod)
        if self.store.workload(key) is None:
            return None
        target_text = canonical_target(target) if target is not None else self.target_filter
        workload = self.commit_workload(mod)
        for r in self.store.top_k(key, target_text, self._hardware(), 8, with_trace=True, rank="mean"):
            t = self._to_tuning_record(r, workload)
            if t is not None:
                return t
        return None

    def __len__(self) -> int:
        return self.store.count(target=self.target_filter, hardware=self._hardware(), has_trace=True)


__all__ = ["StoreDatabase"]
