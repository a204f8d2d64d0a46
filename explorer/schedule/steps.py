"""Schedule steps as plain data: a primitive name and its arguments by name.

Blocks are named as in TVMScript (``C``, ``C_global``), ``NAME#k`` for the k-th of several blocks
that share a name (in the order of the code); a loop is ``BLOCK/LOOP`` with the loop variable's
TVMScript name (``C/i_0``), which is what a person reads in the code, or ``BLOCK/#k`` for the k-th
loop around the block (0: outermost, counted within the block's scope) when names repeat. Steps are JSON,
never Python: a steps file is validated field by field and nothing in it is evaluated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from explorer.schedule.errors import ScheduleError, StepsFileError
from explorer.text import shorten

DESCRIBED_VALUE_CHARS = 72  # an annotation value is shown up to this long (Step.describe's limit)


@dataclass(frozen=True)
class Step:
    """One schedule primitive applied with named arguments."""

    primitive: str
    args: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"primitive": self.primitive, "args": dict(self.args)}

    def describe(self, limit: int | None = DESCRIBED_VALUE_CHARS) -> str:
        """``split(loop=C/i, factors=[None, 32])``: how the history, a message or a list shows it. An
        annotation's value (a parameter of kind ``value``) longer than ``limit`` characters is cut in the
        middle, with its length (an AMX step's ``pragma_import_llvm`` value is the whole LLVM IR of its
        tile kernel, ~5000 characters); ``limit=None``: whole. Names of blocks and loops, and index maps,
        always stay whole."""
        values = _value_params(self.primitive) if limit is not None else frozenset()
        inner = ", ".join(f"{k}={_cut(v, limit) if k in values else _show(v)}" for k, v in self.args.items())
        return f"{self.primitive}({inner})"


def _show(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _value_params(primitive: str) -> frozenset[str]:
    from explorer.schedule.primitives import PRIMITIVES

    known = PRIMITIVES.get(primitive)
    return frozenset(p.name for p in known.params if p.kind == "value") if known else frozenset()


def _cut(value: object, limit: int) -> str:
    text = _show(value)
    if len(text) <= limit:
        return text
    return f"{shorten(' '.join(text.split()), limit)} ({len(text):,} characters)"


# Bounds on what a steps file may hold. A hand schedule has tens of steps (assets/steps/ holds 12);
# a valid 65 MB file of 1.3M steps once took 7 GB in the process that would be the UI server.
MAX_STEPS = 10_000
MAX_STEPS_BYTES = 4 * 2**20


def steps_from_json(data: object) -> list[Step]:
    """Validate a JSON list of steps; raise :class:`StepsFileError` naming the first bad step."""
    from explorer.schedule.primitives import validate_args

    if isinstance(data, dict) and "steps" in data:
        data = data["steps"]
    if not isinstance(data, list):
        raise StepsFileError("a steps file holds a JSON list of {\"primitive\": ..., \"args\": {...}} objects")
    if len(data) > MAX_STEPS:
        raise StepsFileError(f"{len(data)} steps is more than a schedule may have ({MAX_STEPS})")
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


def parse_steps(data: bytes | str, name: str = "the steps file") -> list[Step]:
    """Steps from the bytes of a steps file (an upload, a file read): bounded in size, UTF-8 JSON
    (nested no deeper than Python's JSON reader allows), then validated step by step. Every problem is a
    :class:`StepsFileError` naming ``name``; nothing is parsed beyond the bounds."""
    if len(data) > MAX_STEPS_BYTES:
        raise StepsFileError(f"{name} is {len(data) / 2**20:.1f} MB; a steps file is at most "
                             f"{MAX_STEPS_BYTES // 2**20} MB ({MAX_STEPS} steps)")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise StepsFileError(f"{name} is not UTF-8 text (byte {err.start}): a steps file is JSON") from None
    if "\x00" in data:
        raise StepsFileError(f"{name} holds NUL characters: a steps file is JSON text")
    try:
        parsed = json.loads(data)
    except json.JSONDecodeError as err:
        raise StepsFileError(f"{name} is not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:  # [[[[... 100 000 deep: the reader gives up at its recursion limit
        raise StepsFileError(f"{name} nests lists or objects too deeply: not a steps file") from None
    return steps_from_json(parsed)


def load_steps(path: str | Path) -> list[Step]:
    """The steps in the file at ``path`` (see :func:`parse_steps` for the bounds)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STEPS_BYTES + 1)
    except FileNotFoundError:
        raise StepsFileError(f"no such steps file: {path}") from None
    except IsADirectoryError:
        raise StepsFileError(f"{path} is a folder, not a steps file") from None
    except OSError as err:
        raise StepsFileError(f"cannot read the steps file {path}: {err.strerror or err}") from None
    if len(data) > MAX_STEPS_BYTES:
        raise StepsFileError(f"{path} is larger than {MAX_STEPS_BYTES // 2**20} MB; a steps file is at most "
                             f"{MAX_STEPS} steps")
    return parse_steps(data, str(path))


def dump_steps(steps: list[Step]) -> str:
    return json.dumps([s.to_dict() for s in steps], indent=2)

__all__ = ["DESCRIBED_VALUE_CHARS", "MAX_STEPS", "MAX_STEPS_BYTES", "ScheduleError", "Step", "StepsFileError",
           "dump_steps", "load_steps", "parse_steps", "steps_from_json"]
