"""A schedule session: a kernel, the steps applied to it, undo/redo, and views after each step.

Every step is applied by TVM to a *copy* of the current schedule; only if TVM accepts it does the
copy become current. So a failing step raises :class:`ScheduleError` and leaves the session
exactly as it was. The schedule after every step is kept, so undo, redo and jumping to any
step cost nothing.
"""

from __future__ import annotations

import time

import tvm
from tvm import s_tir

from explorer.errors import short_tvm_message
from explorer.schedule.lint import problems
from explorer.schedule.primitives import apply_primitive, validate_args
from explorer.schedule.step_notes import step_note
from explorer.schedule.steps import ScheduleError, Step, StepsFileError


def tvm_error_summary(err: BaseException, step: Step | None = None) -> str:
    """The line of a ScheduleError that says what went wrong, without the IR dump around it, and
    with TVM's object names (``tirx.For#0``, ``s_tir.SBlock#1``) replaced by the loops and blocks
    they are (as the user picked them: ``C/i``)."""
    text = str(err)
    for marker in ("Error message:", "ScheduleError:"):
        if marker in text:
            tail = text.split(marker)[-1].strip()
            return _named(tail.splitlines()[0] if tail else text, text, step)
    return _named(short_tvm_message(err, 300), text, step)


def _named(message: str, dump: str, step: Step | None) -> str:
    """``message`` with each ``tirx.For#N``/``s_tir.SBlock#N`` named from the IR dump TVM prints
    (a comment ``# tirx.For#N`` above the loop it means), and blocks that share a name named as
    steps name them (``NAME#k``)."""
    import re
    from collections import Counter

    names: dict[str, str] = {}
    lines = dump.splitlines()
    # blocks that share a name are NAME#k, the k-th in program order (explorer.schedule.refs)
    ordinal, seen = {}, Counter()
    for j, line in enumerate(lines):
        if found := re.search(r'T\.sblock\("([^"]+)"', line):
            ordinal[j] = seen[found.group(1)]
            seen[found.group(1)] += 1
    for i, line in enumerate(lines):
        m = re.match(r"\s*# ((?:tirx\.For|s_tir\.SBlock)#\d+)\s*$", line)
        if not m:
            continue
        at = next((j for j in range(i + 1, len(lines)) if lines[j].strip() and not set(lines[j].strip()) <= {"^"}),
                  None)
        code = lines[at] if at is not None else ""
        loop = re.match(r"\s*for (\w+)", code)
        block = re.search(r'T\.sblock\("([^"]+)"', code)
        if m.group(1).startswith("tirx.For") and loop:
            names[m.group(1)] = _loop_ref(loop.group(1), step)
        elif block:
            name = block.group(1)
            names[m.group(1)] = f"'{name}#{ordinal[at]}'" if seen[name] > 1 else f"'{name}'"
    for obj, name in names.items():
        message = re.sub(rf"(?:the )?(?:outer |inner )?(?:loop )?{re.escape(obj)}\b",
                         lambda mm, name=name: mm.group(0).replace(obj, name), message)
    # TVM quotes a block by its bare name: where the step picked one of several (NAME#k), say which
    picked = {}
    for ref in _step_refs(step):
        block = ref.split("/")[0]
        bare, sep, k = block.rpartition("#")
        if sep and k.isdigit():
            picked.setdefault(bare, set()).add(block)
    for bare, blocks in picked.items():
        if len(blocks) == 1:
            message = message.replace(f"'{bare}'", f"'{next(iter(blocks))}'")
    return re.sub(r"(tirx\.For|s_tir\.SBlock)#\d+", lambda mm: "a loop" if "For" in mm.group(1) else "a block",
                  message)


def _step_refs(step: Step | None) -> list[str]:
    """The block and loop references a step names (``C``, ``C/i``, ``C#1/i``)."""
    refs = []
    if step is not None:
        for value in step.args.values():
            refs += value if isinstance(value, list) else [value]
    return [r for r in refs if isinstance(r, str)]


def _loop_ref(var: str, step: Step | None) -> str:
    """The user's name for the loop whose variable is ``var`` (``C/i`` when the step named it)."""
    return next((r for r in _step_refs(step) if r.split("/")[-1] == var), var)


class ScheduleSession:
    """Steps applied to one PrimFunc, with history (see the module docstring)."""

    def __init__(self, func: tvm.tirx.PrimFunc) -> None:
        self.func = func
        self._history: list[Step] = []
        self._schedules: list[s_tir.Schedule] = [s_tir.Schedule(func)]
        self._cursor = 0
        self.last_apply_seconds = 0.0
        self.last_note = ""  # what the last step cost besides the obvious (explorer.schedule.step_notes)

    # -- state -------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        """How many steps of the history are applied."""
        return self._cursor

    @property
    def steps(self) -> list[Step]:
        """The applied steps (undone ones excluded)."""
        return list(self._history[: self._cursor])

    @property
    def history(self) -> list[Step]:
        """Every step, including those undone and still redoable."""
        return list(self._history)

    @property
    def schedule(self) -> s_tir.Schedule:
        return self._schedules[self._cursor]

    @property
    def mod(self) -> tvm.IRModule:
        return self.schedule.mod

    def schedule_at(self, index: int) -> s_tir.Schedule:
        """The schedule after ``index`` steps (0: unscheduled)."""
        return self._schedules[index]

    # -- editing -----------------------------------------------------------------------
    def apply(self, step: Step | dict) -> object:
        """Apply one step on top of the current one, dropping any redoable steps.

        Returns what TVM returned (new loops or blocks). Raises :class:`ScheduleError` or
        :class:`StepsFileError` and changes nothing when the step is invalid."""
        if isinstance(step, dict):
            step = Step(step.get("primitive", ""), step.get("args", {}))
        args = validate_args(step.primitive, step.args)
        step = Step(step.primitive, args)
        start = time.perf_counter()
        trial = self.schedule.copy()
        try:
            result = apply_primitive(trial, step.primitive, args)
        except ScheduleError:
            raise
        except Exception as err:  # TVM raises ScheduleError, InternalError, ValueError, ...: all mean 'invalid step'
            raise ScheduleError(f"{step.describe()}: {tvm_error_summary(err, step)}", tvm_message=str(err)) from None
        issues = problems(trial.mod["main"])
        if issues:
            raise ScheduleError(f"{step.describe()}: {issues[0]}")
        self.last_note = step_note(step, self.schedule.mod, trial.mod)
        del self._history[self._cursor:]
        del self._schedules[self._cursor + 1:]
        self._history.append(step)
        self._schedules.append(trial)
        self._cursor += 1
        self.last_apply_seconds = time.perf_counter() - start
        return result

    def apply_all(self, steps: list[Step]) -> None:
        """Apply steps in order; on failure the session keeps the steps before the bad one and the
        error says which step (0-based) failed."""
        for i, step in enumerate(steps):
            try:
                self.apply(step)
            except ScheduleError as err:
                raise ScheduleError(f"step {i}: {err}", step_index=i, tvm_message=err.tvm_message) from None
            except StepsFileError as err:
                raise StepsFileError(str(err), i) from None

    def undo(self) -> bool:
        if self._cursor == 0:
            return False
        self._cursor -= 1
        return True

    def redo(self) -> bool:
        if self._cursor >= len(self._history):
            return False
        self._cursor += 1
        return True

    def jump(self, index: int) -> None:
        """Show the schedule after ``index`` steps of the history (0 = unscheduled)."""
        if not 0 <= index <= len(self._history):
            raise ScheduleError(f"no step {index}: the history has {len(self._history)} steps")
        self._cursor = index

    def reset(self) -> None:
        """Back to the unscheduled kernel with an empty history."""
        self._history.clear()
        del self._schedules[1:]
        self._cursor = 0
