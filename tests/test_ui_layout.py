"""app/layout.py: data-grid columns sized to what they show (a grid draws on a canvas and cuts
what does not fit: issue 52 found names, targets and hardware cut on three pages), the side
column that folds away where it would be too narrow."""

from __future__ import annotations

import streamlit as st

from app.layout import ROW_MARKER_PX, column_px, columns_px, shown_text, side_column_css, sized_columns, text_px


def test_text_is_measured_as_the_grid_measures_it():
    # chromium's canvas, Streamlit's font at 14 px: 227.5 and 261.9 px (tests/readability.js measures so)
    assert abs(text_px("small_cnn/fused_conv2d1_add1_relu1") - 227.5) < 2
    assert abs(text_px("x86_64/Intel(R) Xeon(R) Processor/avx512/2c") - 261.9) < 3
    assert text_px("\u2265 9.1") >= text_px("> 9.1")  # a character without a width counts as a wide one
    assert text_px("ab", 28) == 2 * text_px("ab")


def test_values_are_shown_as_the_grid_shows_them():
    assert shown_text(0.11900000000000001) == "0.119" and shown_text(None) == "" and shown_text(float("nan")) == ""
    assert shown_text(3.14159, "%.2f") == "3.14" and shown_text("ok", "%.2f") == "ok" and shown_text(True) == "True"


def test_every_column_is_as_wide_as_its_widest_value_or_header():
    rows = [{"id": 7, "workload": "small_cnn/fused_conv2d1_add1_relu1", "GFLOPS": 4.40578, "fits": "yes"},
            {"id": 1234, "workload": "mean", "GFLOPS": None, "fits": "no"}]
    config = sized_columns(rows, {"GFLOPS": st.column_config.NumberColumn(format="%.2f"),
                                  "fits": st.column_config.TextColumn("target fits hardware"), "hidden": None})
    assert set(config) == {"id", "workload", "GFLOPS", "fits"}  # a column not in the rows stays out
    assert all(isinstance(c["width"], int) for c in config.values())
    assert config["workload"]["width"] >= text_px(rows[0]["workload"]) + 16  # the value whole, with the padding
    assert config["fits"]["width"] >= text_px("target fits hardware") + 16  # its label, not its key
    assert config["GFLOPS"]["type_config"]["format"] == "%.2f"  # the column's own settings kept
    assert config["id"]["width"] < config["GFLOPS"]["width"] < config["workload"]["width"]
    assert columns_px(config) == sum(c["width"] for c in config.values())
    assert column_px("x", ["y" * 500]) == 640  # at most so wide
    assert sized_columns(rows, {"fits": None})["fits"] is None  # hidden stays hidden


def test_the_side_column_folds_away_where_its_content_would_not_fit():
    css = side_column_css("layout", "side", "main", need_px=360, share=0.3)
    fold = int(css.split("max-width: ")[1].split("px")[0])
    assert abs(fold - ((360 + 4) / 0.3 + 16)) < 1
    assert (fold - 16) * 0.3 >= 360  # shown only where the column holds its content
    assert ".st-key-layout {container-type: inline-size;}" in css  # the page's width, not the window's
    assert ':has(.st-key-side) {display: none' in css and ':has(.st-key-main) {width: 100%' in css
    assert ROW_MARKER_PX > 0
