"""Session state, in one place: every key a named constant, every access one of the small functions
at the end of this file, so pages never disagree on a spelling and no page touches
``st.session_state`` itself (tests/test_architecture.py checks it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import streamlit as st

T = TypeVar("T")

MODEL_SOURCE = "model_source"  # "Zoo" | "ONNX example" | "ONNX file"
MODEL_NAME = "model_name"
EXAMPLE_NAME = "example_name"
ONNX_PATH = "onnx_path"
ONNX_UPLOAD = "onnx_upload"
SHAPES = "shapes"
PIPELINE = "pipeline"
CUSTOM_PASSES = "custom_passes"
LOADED = "loaded_spec"  # the last spec that loaded and ran: kept when a new one fails
SNAPSHOT = "snapshot"
COMPARE_WITH = "compare_with"  # suffixed with the chosen snapshot: each has its own
SHOW_NESTED = "show_nested"
HIDE_NOOP = "hide_noop"
GRAPH_FOCUS = "graph_focus"
GRAPH_RADIUS = "graph_radius"
GRAPH_START = "graph_start"
GRAPH_VIEW = "graph_view"  # the graph component (pan, zoom, search, details) of the Graph & passes page
GRAPH_KERNEL = "graph_kernel"  # a Kernel the Graph & passes page sends to the Schedule page
USE_GRAPH_KERNEL = "use_graph_kernel"  # Schedule page: show that kernel (a toggle in its sidebar)
GRAPHS_SENT = "graphs_sent"  # keys of the graph payloads this session's browser already holds
DIFF_STYLE = "diff_style"
DIFF_STYLE_KEPT = "diff_style_kept"  # the diff style chosen last, kept while another view is shown
PASS_TABLE = "pass_table"
# containers of the Graph & passes page its CSS places (app/layout.py: side_column_css): the two
# columns, the pass list, the views
PASSES_LAYOUT, PASS_LIST, PASS_VIEWS = "sx_passes", "sx_pass_list", "sx_pass_view"
VIEW_TAB = "view_tab"
OPEN_RECORD = "open_record"  # a record id the Leaderboard asks the Schedule page to open
DB_PATH = "db_path"
KERNEL_SOURCE = "kernel_source"  # "Built-in" | "From a model"
KERNEL_NAME = "kernel_name"
KERNEL_MODEL = "kernel_model"
KERNEL_FUSED = "kernel_fused"
SCHEDULE_SESSIONS = "schedule_sessions"  # {kernel spec: ScheduleSession}
MEASUREMENTS = "measurements"  # {kernel spec: {"naive": MeasureResult, "history": [(steps, MeasureResult)]}}
PRIMITIVE = "next_primitive"
STEP_ERROR = "step_error"
SCHEDULE_VIEW = "schedule_view"
JUMP = "jump_to_step"
RECORD_KERNELS = "record_kernels"  # {"record:ID": (workload name, PrimFunc)} for records whose kernel has no spec
OPENED = "opened_record"  # (kernel spec, steps) to load into the Schedule page
SEARCH_JOB = "search_job"  # the job the Search page shows
JOB_PICK = "job_pick"  # the Search page's job picker (the Profile page sets it to the job it starts)
SKETCHES = "sketches"  # (kernel spec, [Sketch]) last generated on the Search page
SEARCH_PRECISION = "search_precision"  # fp32 | bf16 | int8 (explorer.precision.PRECISIONS): the precision the Search page starts a job at
SCHEDULE_PRECISION = "schedule_precision"  # fp32 | bf16 | int8: the precision a model's kernels are taken at (Schedule page)


CODE_VIEWS = "codegen_views"  # {(module hash, target key): CodeViews} built for the Schedule page


def param_key(kernel: str, param: str) -> str:
    """The Schedule page's input for parameter ``param`` of built-in kernel ``kernel``."""
    return f"param_{kernel}_{param}"


def step_arg_key(primitive: str, arg: str) -> str:
    """The Schedule page's input for argument ``arg`` of the next step's ``primitive``."""
    return f"arg_{primitive}_{arg}"


class LeaderboardKeys:
    """Widget keys of the Leaderboard page."""

    DB_INPUT = "lb_db"
    VIEW = "lb_view"
    WORKLOAD = "lb_workload"
    TARGET = "lb_target"
    HARDWARE = "lb_hardware"
    SOURCE = "lb_source"
    KIND = "lb_kind"
    VERIFIED = "lb_verified_only"
    SINCE = "lb_since"
    RECORD = "lb_record"
    COMPARE_A, COMPARE_B = "lb_compare_a", "lb_compare_b"
    HISTORY_OF = "lb_history_of"
    CHART = "lb_chart"
    DETAIL = "lb_detail"


class ProfileKeys:
    """Widget keys of the Profile page (``PREFIX`` + a name for its many inputs and buttons)."""

    PREFIX = "profile_"
    RESULT = PREFIX + "result"  # (spec, shapes, target key, ProfileResult)
    SWEEP_RESULT = PREFIX + "sweep_result"  # (spec, target key, SweepResult)
    QDQ = PREFIX + "qdq"  # (spec, QDQ model bytes, QuantizeReport)
    IN_MODEL = PREFIX + "in_model"  # keep a record only where it beats the default inside the model
    RECHECK = PREFIX + "recheck"  # take that decision again


class ExportKeys:
    """Widget keys of the Export page."""

    SOURCE = "ex_source"
    MODEL = "ex_model"
    KERNEL = "ex_kernel"
    TARGET_KIND = "ex_target_kind"
    MCPU = "ex_mcpu"
    ARCH = "ex_arch"
    DB_INPUT = "ex_db"
    PICK = "ex_pick_"  # + task name
    IN_MODEL = "ex_in_model"
    PRECISION = "ex_precision"  # fp32 | bf16 | int8 (explorer.precision)
    RECHECK = "ex_recheck"  # take the in-model decision again instead of reusing the one kept
    BUILD = "ex_build"
    DOWNLOAD = "ex_download"
    RESULT = "ex_result"  # {"key": (spec, target, precision), "report": ExportReport, "zip": bytes, "error": str}
    WORKLOADS = "ex_workloads"  # {(spec, shapes, precision): (Workload, [Task] as built at it)}: once per session


def read(key: str, default: Any = None) -> Any:
    """The value kept under ``key`` in this browser session, else ``default``."""
    return st.session_state.get(key, default)


def write(key: str, value: Any) -> None:
    """Keep ``value`` under ``key`` (a widget's key sets what that widget shows on the next run)."""
    st.session_state[key] = value


def take(key: str, default: Any = None) -> Any:
    """The value under ``key``, forgotten as it is read (a request one page hands another once)."""
    return st.session_state.pop(key, default)


def forget(key: str) -> None:
    """Drop ``key`` if it is kept."""
    st.session_state.pop(key, None)


def kept(key: str, make: Callable[[], T]) -> T:
    """The container kept under ``key`` (a dict or set the session fills), made by ``make`` the
    first time."""
    if key not in st.session_state:
        st.session_state[key] = make()
    return st.session_state[key]
