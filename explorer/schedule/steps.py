"""Schedule steps as plain data: a primitive name and its arguments by name.

Blocks are named as in TVMScript (``C``, ``C_global``); a loop is ``BLOCK/LOOP`` with the loop
variable's TVMScript name (``C/i_0``), which is what a person reads in the code. Steps are JSON,
never Python: a steps file is validated field by field and nothing in it is evaluated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from explorer.schedule.errors import ScheduleError, StepsFileError


@dataclass(frozen=True)
class Step:
    """One schedule primitive applied with named arguments."""

    primitive: str
    args: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"primitive": self.primitive, "args": dict(self.args)}

    def describe(self) -> str:
        """``split(loop=C/i, factors=[None, 32])``: how the history lists it."""
        inner = ", ".join(f"{k}={_show(v)}" for k, v in self.args.items())
        return f"{self.primitive}({inner})"


def _show(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def steps_from_json(data: object) -> list[Step]:
    """Validate a JSON list of steps; raise :class:`StepsFileError` naming the first bad step."""
    from explorer.schedule.primitives import validate_args

    if isinstance(data, dict) and "steps" in data:
        data = data["steps"]
    if not isinstance(data, list):
        raise StepsFileError("a steps file holds a JSON list of {\"primitive\": ..., \"args\": {...}} objects")
    steps = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "primitive" not in item:
            raise StepsFileError("each step is an object with a \"primitive\" and its \"args\"", i)
        extra = set(item) - {"primitive", "args"}
        if extra:
            raise StepsFileError(f"unexpected field(s) {', '.join(sorted(extra))}", i)
        args = item.get("args", {})
        if not isinstance(args, dict):
            raise StepsFileError("\"args\" must be an object", i)
        try:
            steps.append(Step(str(item["primitive"]), validate_args(str(item["primitive"]), args)))
        except StepsFileError as err:
            raise StepsFileError(str(err), i) from None
    return steps


def load_steps(path: str | Path) -> list[Step]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StepsFileError(f"no such steps file: {path}") from None
    except json.JSONDecodeError as err:
        raise StepsFileError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    return steps_from_json(data)


def dump_steps(steps: list[Step]) -> str:
    return json.dumps([s.to_dict() for s in steps], indent=2)

__all__ = ["ScheduleError", "Step", "StepsFileError", "dump_steps", "load_steps", "steps_from_json"]
