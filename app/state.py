"""Session-state keys, in one place, so pages never disagree on a spelling."""

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
DIFF_STYLE = "diff_style"
PASS_TABLE = "pass_table"
VIEW_TAB = "view_tab"
OPEN_RECORD = "open_record"  # a record id the Leaderboard asks the Schedule page to open
DB_PATH = "db_path"
