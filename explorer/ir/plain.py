"""TVM values (IntImm, FloatImm, String, Array, Map, ...) as plain JSON data.

Traces (``trace.as_json()``), target configs (``target.export()``) and MetaSchedule records
hold TVM containers and immediates that ``json.dumps`` refuses; this is the one converter.
"""

from __future__ import annotations

from collections.abc import Mapping


def to_plain(obj: object) -> object:
    """``obj`` with every TVM value replaced by its plain Python equivalent; anything else that
    is not JSON becomes its text."""
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        return str(obj)
    value = getattr(obj, "value", None)
    if isinstance(value, bool | int | float):  # IntImm, FloatImm
        return value
    if isinstance(obj, Mapping) or hasattr(obj, "items"):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple) or (hasattr(obj, "__len__") and hasattr(obj, "__getitem__")):
        return [to_plain(v) for v in obj]
    return str(obj)
