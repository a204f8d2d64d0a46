"""Exceptions of the export side: every one a user can act on (see :mod:`explorer.errors`)."""

from __future__ import annotations

from explorer.errors import ExplorerError


class ExportError(ExplorerError):
    """An export, a verification or a benchmark could not be done as asked."""


class BundleError(ExportError):
    """A bundle folder is incomplete, or a file no longer matches the hash in its manifest."""


__all__ = ["BundleError", "ExportError"]
