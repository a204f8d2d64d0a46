"""The Schedule page's link to the leaderboard: save measurements, open stored records.

Lives in ``app`` because it joins two rooms: the store (records) and the explorer (kernels,
schedule sessions); neither may import the other.
"""

from __future__ import annotations

import streamlit as st

from app import state
from explorer.target.environment import hardware_fingerprint
from explorer.kernels import Kernel
from explorer.measure import MeasureResult
from explorer.schedule.session import ScheduleSession
from explorer.ir.plain import to_plain
from store import Record, Store, StoreError, default_db_path


def db_path() -> str:
    """The database the UI uses: the one chosen on the Leaderboard page, else the default."""
    chosen = state.read(state.DB_PATH)
    if chosen:
        return chosen
    try:
        return str(default_db_path())
    except StoreError as err:  # SCHEDX_DB set but empty, or a home folder that cannot hold it
        st.error(str(err))
        st.stop()


def save_measurement(kernel: Kernel, session: ScheduleSession | None, result: MeasureResult, *,
                     source: str = "manual") -> int | None:
    """Store one measurement (the unscheduled baseline too: a manual record with no steps); its record id."""
    from search.records import manual_record

    steps = [s.to_dict() for s in session.steps] if session is not None else []
    trace = to_plain(session.schedule.trace.as_json()) if session is not None else None
    workload, record = manual_record(kernel, steps, trace, result, hardware=hardware_fingerprint(), source=source)
    try:
        with Store(db_path()) as store:
            store.add_workload(workload, replace=False)
            return store.add_record(record)
    except StoreError as err:
        st.warning(f"Measured, but not saved to the leaderboard: {err}")
        return None


def best_known(kernel: Kernel, target: str) -> Record | None:
    """The best verified record of this kernel on this machine for ``target``, from any source."""
    from explorer.workload import workload_key

    try:
        with Store(db_path(), create=False) as store:
            best = store.best(workload=workload_key(kernel.func), target=target, hardware=hardware_fingerprint())
    except StoreError:
        return None
    return best[0] if best else None


def open_requested_record() -> tuple[str, list] | None:
    """If the Leaderboard asked to open a record, or the Search page a sampled sketch:
    ``(kernel spec, steps as dicts)``."""
    from explorer.schedule.trace import trace_to_steps
    from explorer.workload import module_from_b64

    steps_sent = state.take(state.OPENED)  # (spec, steps) from the Search page's sketches
    if steps_sent is not None:
        return steps_sent
    record_id = state.take(state.OPEN_RECORD)
    if record_id is None:
        return None
    try:
        with Store(db_path(), create=False) as store:
            record = store.record(int(record_id))
            workload = store.workload(record.workload_key) if record else None
    except StoreError as err:
        st.error(f"Could not open record {record_id}: {err}")
        return None
    if record is None or workload is None:
        st.error(f"Record {record_id} is not in {db_path()}.")
        return None
    spec = (workload.shapes or {}).get("spec")
    steps = record.steps
    func = module_from_b64(workload.key, workload.mod_b64)["main"] if workload.mod_b64 else None
    if spec is None:  # a search task's or an imported record's kernel: opened from its own module
        if func is None:
            st.error(f"Record {record_id}'s workload keeps no module to open.")
            return None
        spec = f"record:{record_id}"
        state.kept(state.RECORD_KERNELS, dict)[spec] = (workload.name, func)
    if not steps and record.trace is not None:
        try:
            steps = [s.to_dict() for s in trace_to_steps(func, record.trace)]
        except Exception as err:  # noqa: BLE001 - a primitive with no step yet, e.g. a padded transform_layout (TVM's
            # trace replay turns the ScheduleError raised in its callback into a RuntimeError)
            st.error(f"Record {record_id} cannot be opened as steps: {err}. Its trace still applies: "
                     "`schedx export` and `schedx profile` use it.")
            return None
    return spec, steps
