"""Exceptions of the export side: every one a user can act on (see :mod:`explorer.errors`)."""

from __future__ import annotations

from explorer.errors import ExplorerError


class ExportError(ExplorerError):
    """An export, a verification or a benchmark could not be done as asked."""


class TargetError(ExportError):
    """A target spec is not one of ``cpu``, ``cpu:MCPU``, ``cuda``, ``cuda:sm_XX``, or names an
    unknown CPU or GPU architecture."""


class BundleError(ExportError):
    """A bundle folder is incomplete, or a file no longer matches the hash in its manifest."""


__all__ = ["BundleError", "ExportError", "TargetError"]
