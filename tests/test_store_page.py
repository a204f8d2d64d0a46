"""The Leaderboard page on its own under AppTest: empty and filled databases, the plot data."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import state
from store import Record, Store
from store.plots import gflops_by_workload, history_series, measured_peaks, roofline
from tests.store_cases import damage_pages, fill_demo, filled_store

PAGE = Path(__file__).resolve().parent.parent / "app" / "ui" / "leaderboard.py"


def _page(path: Path | None) -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    if path is not None:
        at.session_state[state.DB_PATH] = str(path)
    return at


def test_missing_database_says_how_to_fill_it(tmp_path):
    at = _page(tmp_path / "nothing.db").run()
    assert not at.exception and not at.error
    assert "schedx db import" in at.info[0].value and "No database" in at.info[0].value
    assert not at.dataframe
    assert not (tmp_path / "nothing.db").exists()  # looking does not create files


def test_empty_database_says_how_to_fill_it(tmp_path, monkeypatch):
    Store(tmp_path / "empty.db").close()
    monkeypatch.setenv("SCHEDX_DB", str(tmp_path / "empty.db"))  # the default path honours SCHEDX_DB
    at = _page(None).run()
    assert not at.exception and not at.error
    assert "holds no records" in at.info[0].value and "schedx measure" in at.info[0].value


def test_corrupt_file_is_an_error_message(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 50)
    at = _page(bad).run()
    assert not at.exception
    assert "not a SQLite database" in at.error[0].value
    assert bad.read_bytes() == b"garbage" * 50


def test_damaged_database_is_an_error_message(tmp_path):

    path = filled_store(tmp_path / "damaged.db", 600)
    damage_pages(path)
    at = _page(path).run()
    assert not at.exception and not at.dataframe
    assert "damaged.db is damaged" in at.error[0].value


def test_empty_schedx_db_is_an_error_message(monkeypatch):
    monkeypatch.setenv("SCHEDX_DB", "")
    at = _page(None).run()
    assert not at.exception
    assert "SCHEDX_DB is set but empty" in at.error[0].value


def test_filled_database_shows_table_and_charts(tmp_path):
    import pyarrow as pa

    ids = fill_demo(tmp_path / "demo.db")
    at = _page(tmp_path / "demo.db").run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert set(table["workload"]) == {"matmul_512x512x512_float32", "conv2d_1x64x56x56"}
    assert len(table) == 2  # best per workload on this machine
    assert sorted(table["id"]) == sorted([ids[2], ids[5]])
    charts = at.get("vega_lite_chart")
    assert len(charts) == 1  # one figure at a time: the GFLOPS bars first
    bars = pa.ipc.open_stream(charts[0].proto.data.data).read_all().to_pylist()
    assert {(b["workload"], b["source"]) for b in bars} == {  # bars per workload, grouped by source
        (w, s) for w in ("matmul_512x512x512_float32", "conv2d_1x64x56x56") for s in ("manual", "search")}
    assert '"xOffset"' in charts[0].proto.spec
    assert not at.get("plotly_chart")  # Vega-Lite draws 1-1.5 s sooner than Plotly in a new tab
    for chart, mark in (("History", "step-after"), ("Roofline", '"log"')):  # peaks are known: roofline drawn
        at.segmented_control(key="lb_chart").set_value(chart).run()
        charts = at.get("vega_lite_chart")
        assert not at.exception and len(charts) == 1 and mark in charts[0].proto.spec, chart
    at.radio(key="lb_hardware").set_value("Any machine").run()
    assert len(at.dataframe[0].value) == 3
    fits = dict(zip(at.dataframe[0].value["hardware"], at.dataframe[0].value["target fits hardware"]))
    assert fits["aarch64/elsewhere/neon/64c"] == "x86_64 code, aarch64 machine"  # a znver4 record "measured" there
    at.selectbox(key="lb_source").set_value("manual").run()
    assert set(at.dataframe[0].value["source"]) == {"manual"}


def test_the_table_says_where_a_record_came_from_and_how_it_ended_in_few_columns(tmp_path):
    """A variant of the default rules and a confirmation round's timing read in the source column;
    status and verification in one; every column has a width (the table fits 1600 px)."""
    from app.ui.leaderboard import table_columns, table_rows, table_view

    fill_demo(tmp_path / "demo.db")
    with Store(tmp_path / "demo.db") as store:
        base = store.records(order="id")[2]
        variant = base.to_dict() | {"id": None, "environment": {"default_variant": "default rules, tile ranked 2"},
                                    "candidate": "v1", "verified": True}
        confirmed = base.to_dict() | {"id": None, "environment": {"confirmation": {"rounds": 3}}, "candidate": "c1",
                                      "verified": False}
        store.add_records([Record(**variant), Record(**confirmed)])
        rows = table_rows(store.records(order="id"), {})
    assert [r["source"] for r in rows[-2:]] == ["search · tile ranked 2", "search · confirmed: cold, in turns"]
    assert [r["outcome"] for r in rows[-2:]] == ["ok, verified", "ok, NOT verified"]
    assert rows[3]["outcome"] == "build_error"
    shown, shared = table_view(rows)
    assert set(table_columns(shown)) == set(shown[0])  # every column shown has a width, sized to its values
    assert all(isinstance(c["width"], int) for c in table_columns(shown).values())
    assert "max error" not in shown[0] and "created" not in shown[0]  # in the record's details
    here = [r for r in rows if r["hardware"] == rows[0]["hardware"]]  # one machine's: its columns said once
    shown, shared = table_view(here)
    assert shared["hardware"] == rows[0]["hardware"] and "hardware" not in shown[0]
    workload = table_columns(shown)["workload"]["width"]
    assert workload >= max(len(r["workload"]) for r in here) * 6  # no name cut (about 6-7 px a character)


def test_all_records_view_and_compare(tmp_path):
    ids = fill_demo(tmp_path / "demo.db")
    at = _page(tmp_path / "demo.db").run()
    at.segmented_control(key="lb_view").set_value("All records").run()
    assert not at.exception
    assert len(at.dataframe[0].value) == 6  # this machine: everything but the other machine's record
    at.segmented_control(key="lb_detail").set_value("Compare two records").run()
    at.selectbox(key="lb_compare_a").set_value(ids[1]).run()
    at.selectbox(key="lb_compare_b").set_value(ids[2]).run()
    assert not at.exception
    assert any("steps differ" in c.value for c in at.caption)


def test_open_in_schedule_page_queues_the_record(tmp_path):
    ids = fill_demo(tmp_path / "demo.db")
    at = _page(tmp_path / "demo.db").run()
    at.selectbox(key="lb_record").set_value(ids[2]).run()
    at.button(key=f"lb_open_{ids[2]}").click().run()
    assert not at.exception
    assert at.session_state[state.OPEN_RECORD] == ids[2]


def test_plot_data(tmp_path):
    fill_demo(tmp_path / "demo.db", hardware="hw")
    with Store(tmp_path / "demo.db") as store:
        names = {w.key: w.name for w in store.workloads()}
        bars = gflops_by_workload(store.records(), names)
        assert [(b["workload"], b["source"]) for b in bars] == [
            ("conv2d_1x64x56x56", "import"), ("conv2d_1x64x56x56", "manual"), ("conv2d_1x64x56x56", "search"),
            ("matmul_512x512x512_float32", "manual"), ("matmul_512x512x512_float32", "search")]
        assert bars[-1]["gflops"] == pytest.approx(2 * 512 ** 3 / 0.0015 / 1e9)
        series = history_series(store.history("1001"))
        assert series["metric"] == "gflops" and series["failed"] == 1
        assert [p["record_best"] for p in series["points"]] == [True, True, True]
        assert series["best_so_far"][-1]["value"] == pytest.approx(bars[-1]["gflops"])
        peaks = measured_peaks(store.records())
        assert peaks == (200.0, 40.0)
        data = roofline(store.best(), {w.key: w for w in store.workloads()}, *peaks)
        assert data["ridge"] == 5.0
        assert max(c["gflops"] for c in data["ceiling"]) == 200.0
        mm = next(p for p in data["points"] if p["workload"].startswith("matmul"))
        assert mm["intensity"] == pytest.approx(2 * 512 ** 3 / (3 * 512 * 512 * 4))
        assert measured_peaks([r for r in store.records() if r.source == "import"]) is None


def test_the_table_says_which_times_a_confirmation_round_took():
    """A search's single warm timing and its confirmation's cold time in turns look alike in a
    table of milliseconds: the timing column tells them apart."""
    from app.ui.leaderboard import table_rows
    from store import Record

    base = dict(workload_key="w", target='{"kind": "llvm"}', hardware="h", source="search", status="ok", steps=[],
                trace=None, latencies=[1e-3], median_s=1e-3, gflops=1.0, created="2026-12-01T00:00:00")
    rows = table_rows([Record(**base, environment={}, id=1),
                       Record(**base, environment={"confirmation": {"rounds": 3}}, id=2)], {"w": "matmul"})
    assert [r["source"] for r in rows] == ["search", "search · confirmed: cold, in turns"]
