"""Page "Leaderboard": every measured kernel, by hand or by search, ranked from the SQLite store.

Reads the store through its public API only: filters in the sidebar, a sortable table (best per
workload or every record), charts computed by ``store.plots`` and drawn with Vega-Lite, one record in
detail (open it in the Schedule page), two records compared.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import streamlit as st

from app import state
from app.layout import sized_columns
from app.leaderboard_charts import gflops_chart, history_chart, roofline_chart
from app.state import LeaderboardKeys as K
from store import Outcome, Record, Store, StoreError, default_db_path
from store.compare import compare_records
from store.plots import BESIDE_PRODUCTS, gflops_by_workload, history_series, measured_peaks, roofline
from store.records import KINDS, SOURCES, target_short

# Widget keys of this page (page-local: prefixed, never shared with another page).
ALL = "(all)"
ALL_LIMIT = 2000  # newest records shown in the "All records" view
CHARTS = ("GFLOPS per workload", "History", "Roofline")
DETAILS = ("Record", "Compare two records")
EMPTY_HELP = """This database holds no records yet. Fill it by
- measuring a kernel on the **Schedule** page, or `schedx measure matmul:M=512,N=512,K=512`;
- running a search: `schedx tune ...` (MetaSchedule writes straight into this database);
- importing a MetaSchedule JSON database: `schedx db import path/to/work_dir`;
- merging another machine's database: `schedx db merge other.db`."""


def this_machine() -> str:
    from explorer.target.environment import hardware_fingerprint

    return hardware_fingerprint()


def sidebar(store: Store) -> dict:
    """The filters, as keyword arguments for the store's queries."""
    sb = st.sidebar
    sb.header("Filters")
    names = {w.key: w.name for w in store.workloads()}
    workload = sb.selectbox("Workload", [ALL] + sorted(set(names.values())), key=K.WORKLOAD)
    target = sb.selectbox("Target", [ALL] + store.distinct("target"), key=K.TARGET,
                          format_func=lambda t: t if t == ALL else target_short(t))
    machine = sb.radio("Hardware", ["This machine", "Any machine"], key=K.HARDWARE, horizontal=True,
                       help=f"This machine: {this_machine()}")
    source = sb.selectbox("Source", [ALL, *SOURCES], key=K.SOURCE)
    kind = sb.selectbox("Kind", [ALL, *KINDS], key=K.KIND)
    verified = sb.checkbox("Verified only", key=K.VERIFIED, help="Only records checked against a reference.")
    since = sb.date_input("Since", value=None, key=K.SINCE, max_value=date.today())
    def pick(value):
        return None if value == ALL else value

    return {"workload": pick(workload), "target": pick(target), "source": pick(source), "kind": pick(kind),
            "hardware": this_machine() if machine == "This machine" else None, "verified_only": verified,
            "since": since}


def _fits(target: str, hardware: str, memo: dict) -> str:
    """"" when the record's target can have run on its machine, else why not (a flag, not a filter)."""
    if (target, hardware) not in memo:
        from explorer.target import record_mismatch

        memo[(target, hardware)] = record_mismatch(target, hardware)
    return memo[(target, hardware)]


def _origin(r: Record) -> str:
    """Where a record came from, in a few words: its source, and for a search record the variant of
    the default rules it is or that the confirmation round timed it again."""
    env = r.environment or {}
    parts = [r.source]
    if env.get("default_variant"):
        parts.append(env["default_variant"].removeprefix("default rules, "))
    if "confirmation" in env:
        parts.append("confirmed: cold, in turns")
    return " · ".join(parts)


def _outcome(r: Record) -> str:
    if r.status != Outcome.OK:
        return str(r.status)
    return {True: "ok, verified", False: "ok, NOT verified"}.get(r.verified, "ok, unchecked")


def table_rows(records: list[Record], names: dict[str, str]) -> list[dict]:
    """Everything the table can show of each record (:func:`table_view` picks what it shows)."""
    memo: dict = {}
    return [{"id": r.id, "workload": names.get(r.workload_key, r.workload_key),
             "GFLOPS": None if r.gflops is None else round(r.gflops, 3),
             "median ms": None if r.median_s is None else r.median_s * 1e3, "source": _origin(r),
             "outcome": _outcome(r), "max error": r.max_error,
             "target": target_short(r.target), "hardware": r.hardware,
             "target fits hardware": _fits(r.target, r.hardware, memo) or "yes",
             "created": r.created[:16].replace("T", " "), "error": r.error[:120]} for r in records]


SHARED = ("target", "hardware", "target fits hardware", "error")  # said once above the table when every row agrees
DETAIL_ONLY = ("max error", "created")  # in the record's details below the table


def table_view(rows: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """The table's rows as shown, and what every row shares (said once above the table): few
    columns, each as wide as its content (:func:`table_columns`), none cut, and no scrolling
    sideways at 1100 px on one machine's records (the target, the hardware and their fit are the
    same in every row there; at 1600 px they were cut to 84-99 px of the 261-291 they need)."""
    shared = {c: rows[0][c] for c in SHARED if rows and all(r[c] == rows[0][c] for r in rows)}
    return [{k: v for k, v in r.items() if k not in shared and k not in DETAIL_ONLY} for r in rows], shared


def table_columns(rows: list[dict]) -> dict:
    """The shown columns (:func:`table_view`), each as wide as its widest value or header."""
    num = st.column_config.NumberColumn
    return sized_columns(rows, {"id": num(), "GFLOPS": num(format="%.2f"), "median ms": num(format="%.4f"),
                                "target fits hardware": st.column_config.TextColumn("fits")})


def _shared_caption(shared: dict[str, str]) -> str:
    said = [f"{name} **{value}**" for name, value in shared.items() if value and name not in ("target fits hardware",
                                                                                                "error")]
    if shared.get("target fits hardware", "yes") != "yes":
        said.append(f"the target does not fit the hardware: {shared['target fits hardware']}")
    return "Every record here: " + ", ".join(said) if said else ""


def charts(store: Store, filters: dict, names: dict[str, str]) -> None:
    by_source = store.best(**filters, per_source=True)
    # one figure at a time: tabs would build and send all three on every rerun (at 100k records the
    # page took 2.6 s to redraw with them)
    chart = st.segmented_control("Chart", CHARTS, default=CHARTS[0], key=K.CHART) or CHARTS[0]
    if chart == "GFLOPS per workload":
        rows = gflops_by_workload(by_source, names)
        if rows:
            st.altair_chart(gflops_chart(rows), width="stretch")
        else:
            st.info("No ranked record with known FLOPs matches the filters.")
    elif chart == "History":
        keys = sorted({r.workload_key for r in by_source}, key=lambda k: names.get(k, k))
        if keys:
            key = st.selectbox("Workload", keys, key=K.HISTORY_OF, format_func=lambda k: names.get(k, k))
            series = history_series(store.history(key, target=filters["target"], hardware=filters["hardware"]))
            st.altair_chart(history_chart(series), width="stretch")
            st.caption(f"{len(series['points'])} ranked measurements, {series['failed']} failed (not plotted).")
        else:
            st.info("No workload matches the filters.")
    else:
        peaks = measured_peaks(by_source)
        if peaks is None:
            st.info("No measured peaks in these records' environment. The Schedule page's calibration adds "
                    "`peak_gflops` and `peak_gbps` to every measurement it saves; records from search or "
                    "import have none, and no figure is made up.")
        else:
            data = roofline(by_source, {w.key: w for w in store.workloads()}, *peaks)
            st.altair_chart(roofline_chart(data), width="stretch")
            beside = sum(p["counted"] == BESIDE_PRODUCTS for p in data["points"])
            st.caption(f"Peaks measured on this machine: {peaks[0]:.0f} GFLOPS, {peaks[1]:.0f} GB/s; "
                       f"{len(data['points'])} records with known bytes."
                       + (f" {beside} hollow diamond(s): kernels whose FLOPs are largely element-wise work (a fused "
                          "activation's exp, its clamps) beside their multiply-adds. Those ops run on other vector "
                          "units than the FMAs whose peak the ceiling is, so such a point may sit above it: no figure "
                          "of the FMA units." if beside else ""))


def open_in_schedule(record_id: int) -> None:
    state.write(state.OPEN_RECORD, record_id)
    try:
        st.switch_page("ui/schedule.py")
    except Exception:  # noqa: BLE001 - this page running alone (tests) has no navigation to switch in
        st.info(f"Record {record_id} is queued for the Schedule page: open it from the navigation.")
        st.markdown("[Schedule page](/schedule)")


def record_labels(records: list[Record], names: dict[str, str]) -> dict[int, str]:
    """``#12 matmul_512... · search · 178.96 GFLOPS`` for the record pickers."""
    def speed(r: Record) -> str:
        if r.gflops is not None:
            return f"{r.gflops:.2f} GFLOPS"
        return f"{r.median_s * 1e3:.4f} ms" if r.median_s is not None else r.status
    return {r.id: f"#{r.id} {names.get(r.workload_key, r.workload_key)} · {r.source} · {speed(r)}" for r in records}


def record_detail(store: Store, labels: dict[int, str], names: dict[str, str]) -> None:
    rid = st.selectbox("Record", list(labels), key=K.RECORD, format_func=labels.get)
    r = store.record(rid) if rid is not None else None
    if r is None:
        return
    cols = st.columns(4)
    cols[0].metric("GFLOPS", "-" if r.gflops is None else f"{r.gflops:.2f}")
    cols[1].metric("median", "-" if r.median_s is None else f"{r.median_s * 1e3:.4f} ms")
    cols[2].metric("status", r.status)
    cols[3].metric("verified", {None: "-", True: "yes", False: "no"}[r.verified])
    st.caption(f"{names.get(r.workload_key, r.workload_key)} · {_origin(r)} · {target_short(r.target)} · "
               f"{r.hardware} · {r.created}" + ("" if r.max_error is None else f" · max error {r.max_error:.1e}"))
    if r.error:
        st.error(r.error)
    if st.button("Open in Schedule page", key=f"lb_open_{rid}", disabled=not (r.steps or r.trace),
                 help="Loads this record's steps (or its MetaSchedule trace, as steps) into the editor."):
        open_in_schedule(rid)
    left, right = st.columns(2)
    left.markdown("**Steps**")
    left.json(r.steps or [], expanded=False)
    right.markdown("**Environment**")
    right.json(r.environment or {}, expanded=False)


def compare_view(store: Store, labels: dict[int, str]) -> None:
    ids = list(labels)
    if len(ids) < 2:
        st.info("Two records are needed to compare.")
        return
    cols = st.columns(2)
    a = cols[0].selectbox("Record A", ids, key=K.COMPARE_A, format_func=labels.get)
    b = cols[1].selectbox("Record B", ids, index=1, key=K.COMPARE_B, format_func=labels.get)
    ra, rb = store.record(a), store.record(b)
    if ra is None or rb is None:
        return
    diff = compare_records(ra, rb)
    speed = diff["b_speedup_over_a"]
    st.caption(("same workload" if diff["same_workload"] else "different workloads")
               + (f" · B is {speed:.2f}x as fast as A" if speed else "")
               + f" · {diff['steps_differ']} steps differ · {len(diff['decisions'])} decisions differ")
    steps = [{"A": json.dumps(row["a"]) if row["a"] else "", "B": json.dumps(row["b"]) if row["b"] else "",
              "difference": row["status"] + (f" ({', '.join(row['differing_args'])})" if row["differing_args"] else "")}
             for row in diff["steps"]]
    if steps:
        st.dataframe(steps, hide_index=True, width="stretch")
    if diff["decisions"]:
        st.markdown("**Trace decisions that differ**")
        st.dataframe([{"instruction": d["instruction"], "inputs": json.dumps(d["inputs"]), "A": json.dumps(d["a"]),
                       "B": json.dumps(d["b"])} for d in diff["decisions"]], hide_index=True, width="stretch")
    elif not steps:
        st.info("Neither record has steps or a trace to compare.")


def main() -> None:
    st.title("Leaderboard")
    try:
        default = str(default_db_path())
    except StoreError as err:  # SCHEDX_DB set but empty: say so, and let a path be typed
        st.error(str(err))
        default = ""
    text = st.sidebar.text_input("Database", value=state.read(state.DB_PATH) or default, key=K.DB_INPUT,
                                 help="A schedx SQLite file ($SCHEDX_DB or --db elsewhere).")
    if not text.strip():
        st.info("Type the path of a schedx database in the sidebar.\n\n" + EMPTY_HELP)
        return
    path = Path(text).expanduser()
    state.write(state.DB_PATH, str(path))
    try:
        if not path.exists():
            st.info(f"No database at `{path}` yet.\n\n" + EMPTY_HELP)
            return
        with Store(path, create=False) as store:
            show(store, path)
    except (OSError, ValueError, StoreError) as err:  # damaged, foreign, unreadable: one message
        st.error(str(err))


def show(store: Store, path: Path) -> None:
    """The leaderboard of an open store: filters, table, charts, one record, two compared."""
    if store.read_only:
        st.caption(f"`{path}` is read-only here: it can be browsed, not written.")
    if store.count() == 0:
        st.info(EMPTY_HELP)
        return
    filters = sidebar(store)
    names = {w.key: w.name for w in store.workloads()}
    view = st.segmented_control("Show", ["Best per workload", "All records"], default="Best per workload",
                                key=K.VIEW) or "Best per workload"
    if view == "Best per workload":
        records = store.best(**filters)
    else:
        records = store.records(**filters, order="newest", limit=ALL_LIMIT)
    st.caption(f"{len(records)} {'best records' if view.startswith('Best') else 'records'} · "
               f"{store.count()} in {path}")
    if not records:
        st.warning("No record matches these filters" + (" on this machine: try 'Any machine'."
                                                        if filters["hardware"] else "."))
        return
    rows, shared = table_view(table_rows(records, names))
    said = _shared_caption(shared)
    if said:
        st.caption(said)
    st.dataframe(rows, hide_index=True, width="stretch", column_config=table_columns(rows))
    charts(store, filters, names)
    labels = record_labels(records, names)
    detail = st.segmented_control("Detail", DETAILS, default=DETAILS[0], key=K.DETAIL) or DETAILS[0]
    if detail == DETAILS[0]:
        record_detail(store, labels, names)
    else:
        compare_view(store, labels)

main()
