"""Errors of schedule steps: a step TVM refuses, a steps file that is malformed."""

from __future__ import annotations

from explorer.errors import ExplorerError


class ScheduleError(ExplorerError):
    """A step could not be applied; the session is left exactly as it was.

    ``tvm_message`` keeps TVM's own diagnostic (with the IR it points at) for those who want it."""

    def __init__(self, message: str, *, step_index: int | None = None, tvm_message: str = "") -> None:
        self.step_index = step_index
        self.tvm_message = tvm_message
        super().__init__(message)


class StepsFileError(ExplorerError):
    """A steps file or list is malformed; ``index`` is the bad step (0-based), or None."""

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(f"step {index}: {message}" if index is not None else message)


__all__ = ["ScheduleError", "StepsFileError"]
