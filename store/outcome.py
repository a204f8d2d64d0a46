"""How a measurement ends, the one vocabulary from the worker that builds or times a schedule to
the record in the store. It imports nothing, so every room may use it (``explorer`` too, which
otherwise never imports the store)."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How a measurement ended: the record's ``status``. A value, never a prefix of the error text.

    Only ``ok`` records rank. ``infra_error`` means the failure was not the candidate's (a worker
    that could not start, an RPC device that could not be reached): a resumed search measures such
    a candidate again. Members are ``str``: ``Outcome.OK == "ok"``."""

    OK = "ok"
    BUILD_ERROR = "build_error"
    RUN_ERROR = "run_error"
    VERIFY_FAILED = "verify_failed"
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"


__all__ = ["Outcome"]
